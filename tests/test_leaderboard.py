"""Board: a leaderboard on one sorted set (docs/protocol.md, "Leaderboards"),
and the workshop game's scoring that feeds it (example_project)."""

import uuid

import pytest
import redis

from echomq_django import Board
from echomq_django.rules import MAX_MS
from example_project.notifications.scoring import MAX_POINTS, percentage, points


@pytest.fixture
def key():
    return f"cm:{uuid.uuid4().hex[:12]}:board"


@pytest.fixture(params=["bytes", "str"])
def client(request, conn, redis_client):
    """Both kinds of connection: get_connection()'s (bytes) and a decoding one."""
    return conn if request.param == "bytes" else redis_client


def test_submit_keeps_each_member_s_best(client, redis_client, key):
    board = Board(client, key)
    assert board.submit("USR-ada", 50) is True       # new member
    assert board.submit("USR-ada", 30) is False      # lower: kept 50
    assert board.submit("USR-ada", 50) is False      # equal: nothing changes
    assert board.score("USR-ada") == 50.0
    assert board.submit("USR-ada", 70.5) is True     # better
    assert board.score("USR-ada") == 70.5
    assert redis_client.zrange(key, 0, -1, withscores=True) == [("USR-ada", 70.5)]


def test_top_is_best_first_and_rank_agrees(client, key):
    board = Board(client, key)
    for member, score in [("bo", 240), ("ada", 600), ("cy", 280), ("dee", -20.5), ("eve", 460)]:
        board.submit(member, score)
    assert board.top(3) == [("ada", 600.0), ("eve", 460.0), ("cy", 280.0)]
    assert board.top() == [("ada", 600.0), ("eve", 460.0), ("cy", 280.0), ("bo", 240.0),
                           ("dee", -20.5)]
    assert board.top(1000) == board.top(5)
    assert all(isinstance(m, str) and isinstance(s, float) for m, s in board.top())
    assert [board.rank(m) for m, _ in board.top()] == [0, 1, 2, 3, 4]


def test_ties_rank_in_reverse_byte_order_and_rank_agrees_with_top(client, key):
    board = Board(client, key)
    for member in ["amy", "zed", "kim"]:
        board.submit(member, 300)
    board.submit("top", 301)
    assert board.top(4) == [("top", 301.0), ("zed", 300.0), ("kim", 300.0), ("amy", 300.0)]
    assert [board.rank(m) for m in ["top", "zed", "kim", "amy"]] == [0, 1, 2, 3]


def test_missing_members_and_boards_answer_none_and_nothing(client, key):
    board = Board(client, key)
    assert board.top(10) == []
    assert board.rank("nobody") is None
    assert board.score("nobody") is None
    board.submit("ada", 1)
    assert board.rank("nobody") is None and board.score("nobody") is None


def test_scores_are_exact_up_to_2_53_and_any_text_is_a_member(client, key):
    board = Board(client, key)
    board.submit("big", MAX_MS)
    board.submit("small", -MAX_MS)
    board.submit("Ädä 🎲 with spaces", 0.1)
    assert board.score("big") == float(MAX_MS) and board.score("small") == -float(MAX_MS)
    assert board.rank("Ädä 🎲 with spaces") == 1
    assert board.top(3)[1] == ("Ädä 🎲 with spaces", 0.1)


def test_a_key_with_a_hash_tag_is_the_caller_s_to_choose(conn, redis_client):
    key = "cm:{" + uuid.uuid4().hex[:8] + "}:board"
    Board(conn, key).submit("ada", 3)
    assert redis_client.zscore(key, "ada") == 3.0


NOWHERE = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)


@pytest.mark.parametrize("bad_key, error", [
    (None, TypeError), (7, TypeError), (b"cm:board", TypeError), ("", ValueError),
    ("x" * 201, ValueError), ("cm:\ud800", ValueError),
    ("emq:{mail}:pending", ValueError), ("emq:{rl:chat}", ValueError),
])
def test_a_bad_key_is_refused_at_construction(bad_key, error):
    with pytest.raises(error, match=r"^key must"):
        Board(NOWHERE, bad_key)


@pytest.mark.parametrize("member, score, error, name", [
    (None, 1, TypeError, "member"), (7, 1, TypeError, "member"), (b"ada", 1, TypeError, "member"),
    ("", 1, ValueError, "member"), ("x" * 201, 1, ValueError, "member"),
    ("a\udcff", 1, ValueError, "member"),
    ("ada", None, TypeError, "score"), ("ada", "5", TypeError, "score"),
    ("ada", True, TypeError, "score"), ("ada", float("nan"), ValueError, "score"),
    ("ada", float("inf"), ValueError, "score"), ("ada", float("-inf"), ValueError, "score"),
    ("ada", MAX_MS + 1, ValueError, "score"), ("ada", -MAX_MS - 1, ValueError, "score"),
])
def test_bad_submissions_are_refused_before_anything_is_sent(
        conn, redis_client, key, member, score, error, name):
    with pytest.raises(error, match=rf"^{name} must"):
        Board(conn, key).submit(member, score)
    assert redis_client.exists(key) == 0
    with pytest.raises(error, match=rf"^{name} must"):
        Board(NOWHERE, key).submit(member, score)


@pytest.mark.parametrize("call", ["rank", "score"])
@pytest.mark.parametrize("member, error", [
    (None, TypeError), (3, TypeError), ("", ValueError), ("x" * 201, ValueError),
    ("\ud800", ValueError),
])
def test_reads_refuse_a_bad_member(key, call, member, error):
    with pytest.raises(error, match=r"^member must"):
        getattr(Board(NOWHERE, key), call)(member)


@pytest.mark.parametrize("n, error", [
    (0, ValueError), (-1, ValueError), (1001, ValueError), (1.5, TypeError), (True, TypeError),
    ("3", TypeError), (None, TypeError),
])
def test_top_refuses_a_bad_n(key, n, error):
    with pytest.raises(error, match=r"^n must"):
        Board(NOWHERE, key).top(n)


# -- the workshop's scoring (seed 004, move 5) ------------------------------

SECRET = ["🍕", "🚀", "🎸", "🌵", "🐙", "🎲"]


@pytest.mark.parametrize("guess, total", [
    (SECRET, 600),                                      # all in place
    (["🚀", "🍕", "🎸", "🌵", "🐙", "🎲"], 560),        # two swapped: 80 + 80 + 4 * 100
    (list(reversed(SECRET)), 240),                      # distances 5,3,1,1,3,5
    (["🍩", "🍪", "🥑", "🍋", "🧀", "🥨"], 0),           # none in the secret
    (["🍩", "🍕", "🍪", "🥑", "🍋", "🧀"], 80),          # one, one off
    (["🎲", "🍪", "🥑", "🍋", "🧀", "🍕"], 0),           # two, five off each: 0 + 0
])
def test_points_are_100_minus_20_per_place_off(guess, total):
    assert points(guess, SECRET) == total


@pytest.mark.parametrize("total, pct", [(600, 100), (560, 93), (460, 77), (280, 47), (240, 40),
                                        (20, 3), (0, 0), (560.0, 93)])
def test_the_percentage_is_computed_on_read(total, pct):
    assert percentage(total) == pct == round(total / MAX_POINTS * 100)


@pytest.mark.parametrize("guess, error", [
    ("🍕🚀🎸🌵🐙🎲", TypeError), (["🍕", 1, "🎸", "🌵", "🐙", "🎲"], TypeError),
    (SECRET[:5], ValueError), (SECRET + ["🍩"], ValueError),
    (["🍕", "🍕", "🎸", "🌵", "🐙", "🎲"], ValueError),
])
def test_a_malformed_guess_is_refused(guess, error):
    with pytest.raises(error, match="guess must"):
        points(guess, SECRET)


def test_the_board_keeps_each_player_s_best_total_and_reads_percentages(conn, key):
    board = Board(conn, key)
    for player, guess in [("ada", ["🚀", "🍕", "🎸", "🌵", "🐙", "🎲"]), ("ada", SECRET),
                          ("cy", SECRET[::-1]), ("cy", ["🍩", "🍕", "🍪", "🥑", "🍋", "🧀"])]:
        board.submit(player, points(guess, SECRET))
    assert [(p, percentage(t)) for p, t in board.top(2)] == [("ada", 100), ("cy", 40)]
