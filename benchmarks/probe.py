"""What every benchmark handler records, in one place for all four systems.

Handlers of EchoMQ, RQ, Huey and Celery call these two functions with a
redis-py client their own worker already holds where it exposes one (EchoMQ's
``get_connection()``, RQ's job connection, Huey's storage connection) and a
per-process client otherwise (Celery). Times are the SERVER's ``TIME`` in Unix
ms, so every system is measured on the same clock as the intended run-at.

Keys (benchmark-only, on the benchmark's own server): ``bench:late:SYSTEM``
(a list of ``"run_at_ms start_ms"``), ``bench:done:SYSTEM`` (a counter) and
``bench:done:SYSTEM:first`` / ``:last`` (server ms of the first and last job).
"""

from __future__ import annotations

import os

import redis

# One round trip per job: count it and, for the first and the last job, stamp
# the server clock. All keys come in through KEYS.
_COUNT = """
local n = redis.call('INCR', KEYS[1])
if n == 1 or n == tonumber(ARGV[1]) then
  local t = redis.call('TIME')
  local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('SET', n == 1 and KEYS[2] or KEYS[3], ms)
end
return n
"""

_client: tuple[int, redis.Redis] | None = None


def own_client() -> redis.Redis:
    """A client for this process (rebuilt after a fork) on ``BENCH_REDIS_URL``."""
    global _client
    if _client is None or _client[0] != os.getpid():
        _client = (os.getpid(), redis.Redis.from_url(os.environ["BENCH_REDIS_URL"]))
    return _client[1]


def server_ms(conn: redis.Redis) -> int:
    """The server's clock now, in Unix ms."""
    seconds, micros = conn.time()
    return int(seconds) * 1000 + int(micros) // 1000


def record_start(conn: redis.Redis, system: str, run_at_ms: int) -> None:
    """Record that a job meant for ``run_at_ms`` started now (server clock)."""
    conn.rpush(f"bench:late:{system}", f"{run_at_ms} {server_ms(conn)}")


def count_done(conn: redis.Redis, system: str, total: int) -> None:
    """Count one finished no-op job of ``total``; stamp the first and the last."""
    key = f"bench:done:{system}"
    conn.eval(_COUNT, 3, key, f"{key}:first", f"{key}:last", total)
