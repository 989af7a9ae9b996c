"""The server clock, read from Python: every "now" EchoMQ uses is the server's.

Scripts read ``TIME`` themselves (``lua/includes/now.lua``); Python reads it
here, when it must compute something the server cannot (a cron occurrence, a
page's "in 3 min"). Nothing in EchoMQ compares a host clock with a stored time.
"""

from __future__ import annotations

from typing import Any

__all__ = ["server_now_ms", "time_reply_ms"]


def time_reply_ms(reply: Any) -> int:
    """A ``TIME`` reply (``(seconds, microseconds)``, bytes, str or int) as Unix ms."""
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000


def server_now_ms(conn) -> int:
    """The server's ``TIME`` in Unix ms (one command)."""
    return time_reply_ms(conn.time())
