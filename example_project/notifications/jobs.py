"""The workshop's notification worker (seed 004), on EchoMQ.

Every notice goes through three layers of control, as the seed describes:

- **fairness**: :func:`notify` puts each notice on its chat's lane
  (``group=chat``), so one chat's burst cannot starve the others;
- **rate**: the queue's limits (``ECHOMQ["QUEUE_LIMITS"]`` in the settings,
  held by every claim on the server clock): about 30 sends a second in all,
  about 1 a second and one at a time per chat. A room (a group chat, ``RMM-*``)
  has a tighter budget of its own, Telegram's 20 a minute per group, scaled
  down here to ``ROOM_BUDGET``; ``deliver`` takes a token from a
  :class:`~echomq_django.RateLimiter` before each send to a room and, when
  the budget is spent, re-enqueues the notice as a fresh job after the wait
  (``enqueue_in``) and acks: deferred, never dropped (move 3);
- **delivery**: a transient failure (429, 5xx) is retried with capped
  exponential backoff and full jitter, up to six attempts (move 4); a chat
  that blocked the bot (403) is dropped at once with ``Discard``.

``round_start_reminder`` is scheduled for an absolute instant (move 1) and
``standings_digest`` is the daily digest naming the leaderboard's top players
(moves 2 and 5).

The fake chat API keeps its state in Redis, so it behaves the same whichever
worker process runs the job, and logs every call it answers (the claim's
instant and the call's end, both on the server clock) so the workshop can
measure what the limits held.
"""

from echomq_django import Backoff, Board, Discard, RateLimiter, get_connection, job
from echomq_django.protocol.clock import server_now_ms

from .scoring import percentage

QUEUE = "cm.notify"
#: The workshop's leaderboard: each player's best total (seed 002's cm:<game>:board).
BOARD = "cm:workshop:board"
#: A room's own budget, (count, per_ms): Telegram lets a bot send 20 messages
#: a minute to one group; the workshop scales that to 2 per 3 s to stay short.
ROOM_BUDGET = (2, 3_000)
#: How long the fake API's call logs are kept (s).
LOG_TTL_S = 3_600


class TransientDeliveryError(Exception):
    """The chat API answered 429 or 5xx: try again later."""


class BlockedError(Exception):
    """The chat API answered 403: the bot was blocked; retrying cannot help."""


def sends_key(chat: str) -> str:
    """The list where the fake API logs each call for ``chat``:
    ``"<claimed at ms>|<ended at ms>"``, server clock."""
    return f"workshop:sends:{chat}"


def fake_chat_api(chat: str, text: str, fail_first: int, claimed_at_ms: int) -> int:
    """Pretend to send ``text`` to ``chat``: the first ``fail_first`` calls for a
    chat fail with a 429; chats named "blocked-*" always answer 403 and
    "down-*" 503. Every call is logged (:func:`sends_key`). Returns the call
    number."""
    conn = get_connection()
    calls = conn.incr(f"workshop:calls:{chat}")
    try:
        if chat.startswith("blocked-"):
            raise BlockedError(f"403 Forbidden: bot was blocked by {chat}")
        if chat.startswith("down-"):
            raise TransientDeliveryError(f"503 Service Unavailable (call {calls} for {chat})")
        if calls <= fail_first:
            raise TransientDeliveryError(f"429 Too Many Requests (call {calls} for {chat})")
        return calls
    finally:
        log = sends_key(chat)
        conn.pipeline().rpush(log, f"{claimed_at_ms}|{server_now_ms(conn)}") \
            .expire(log, LOG_TTL_S).execute()


def notify(chat: str, text: str, fail_first: int = 0):
    """Enqueue a notice on ``chat``'s lane (the seed's ``Notifier``). Returns
    the :class:`~echomq_django.JobHandle`."""
    return deliver.using(group=chat).enqueue(chat, text, fail_first=fail_first)


def notify_in(delay_ms: int, chat: str, text: str, fail_first: int = 0):
    """:func:`notify` after ``delay_ms`` (server clock)."""
    return deliver.using(group=chat).enqueue_in(delay_ms, chat, text, fail_first=fail_first)


@job(queue=QUEUE, max_attempts=6, context=True,
     backoff=Backoff.exponential(base_ms=200, cap_ms=2_000, jitter=True))
def deliver(chat: str, text: str, fail_first: int = 0, context=None) -> dict:
    """Deliver one notice. A room over its budget is deferred: the notice is
    re-enqueued as a fresh job after the wait and this one ends done, naming
    it (``{"deferred_ms": ms, "as": job_id}``). Transient failures are retried
    with backoff; a blocked bot is dropped at once (the seeds' delivery
    classification)."""
    if chat.startswith("RMM-"):
        wait_ms = RateLimiter(get_connection()).take(f"room:{chat}", *ROOM_BUDGET)
        if wait_ms:
            again = notify_in(wait_ms, chat, text, fail_first=fail_first)
            return {"deferred_ms": wait_ms, "as": again.job_id}
    try:
        call = fake_chat_api(chat, text, fail_first, context.claimed_at_ms)
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
