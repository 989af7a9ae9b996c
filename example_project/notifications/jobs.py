"""The workshop's notification worker (seed 004), on EchoMQ.

- ``round_start_reminder``: scheduled for an absolute instant (``enqueue_at``).
- ``deliver``: sends a notice through a fake chat API that fails transiently a
  few times before it succeeds; retried with capped exponential backoff and
  full jitter, up to six attempts (the seeds' ``@max_attempts``).
- ``deliver`` to a chat that blocked the bot is a permanent failure: the
  handler raises ``Discard`` and the job is dead at once, never retried.
- ``deliver`` to a chat whose API stays down (503 every time) is retried until
  its sixth attempt fails, then dead-lettered with the traceback.
- ``standings_digest``: the daily digest names the leaderboard's top players
  (``BOARD``, each player's best total of :mod:`.scoring`).

The fake API keeps its state in Redis, so it behaves the same whichever
worker process runs the job.
"""

from echomq_django import Backoff, Board, Discard, get_connection, job

from .scoring import percentage

QUEUE = "cm.notify"
#: The workshop's leaderboard: each player's best total (seed 002's cm:<game>:board).
BOARD = "cm:workshop:board"


class TransientDeliveryError(Exception):
    """The chat API answered 429 or 5xx: try again later."""


class BlockedError(Exception):
    """The chat API answered 403: the bot was blocked; retrying cannot help."""


def fake_chat_api(chat: str, text: str, fail_first: int) -> int:
    """Pretend to send ``text`` to ``chat``: the first ``fail_first`` calls for a
    chat fail with a 429; chats named "blocked-*" always answer 403. Returns the
    call number."""
    calls = get_connection().incr(f"workshop:calls:{chat}")
    if chat.startswith("blocked-"):
        raise BlockedError(f"403 Forbidden: bot was blocked by {chat}")
    if chat.startswith("down-"):
        raise TransientDeliveryError(f"503 Service Unavailable (call {calls} for {chat})")
    if calls <= fail_first:
        raise TransientDeliveryError(f"429 Too Many Requests (call {calls} for {chat})")
    return calls


@job(queue=QUEUE, max_attempts=6,
     backoff=Backoff.exponential(base_ms=200, cap_ms=2_000, jitter=True))
def deliver(chat: str, text: str, fail_first: int = 0) -> dict:
    """Deliver one notice; transient failures are retried with backoff, a
    blocked bot is dropped at once (the seeds' delivery classification)."""
    try:
        call = fake_chat_api(chat, text, fail_first)
    except BlockedError as err:
        raise Discard(str(err)) from err
    return {"chat": chat, "delivered_on_call": call}


@job(queue=QUEUE, max_attempts=3, backoff=Backoff.fixed(100))
def round_start_reminder(room: str, round_id: str) -> str:
    """Remind a room that its round starts now."""
    return f"round {round_id} in {room} starts now"


@job(queue=QUEUE, cron="0 9 * * *", tz="Europe/Berlin", context=True)
def standings_digest(context) -> dict:
    """The daily standings digest (seed 004, Move 2): every day at 09:00 Berlin
    time, one job per day however many metronomes run. A catch-up after
    downtime says how many days it stands for. It names the board's top three
    (Move 5), each with the percentage of 600 computed here, on read."""
    top = Board(get_connection(), BOARD).top(3)
    return {"slot_ms": context.scheduled_for_ms, "missed": context.missed,
            "top": [[player, percentage(total)] for player, total in top]}
