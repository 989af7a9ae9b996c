"""Fencing tokens: minted by the client, never repeated for a queue.

A claim's token fences every later call for that lease (ack, retry, extend,
...). It is a random 64-bit prefix drawn once per process (and again in a
forked child) plus a per-process counter, so no two leases ever share one,
whatever the server forgets: a server restarted from an older snapshot, or a
failover to a replica that lagged, cannot hand a new holder the token an old
holder still has (a counter kept on the server would repeat; see
docs/protocol.md, "Fencing tokens"). A claim is also idempotent per token:
repeating it after a lost reply answers the same lease.
"""

from __future__ import annotations

import itertools
import os
import secrets

__all__ = ["new_token"]

_prefix = secrets.token_hex(8)
_counter = itertools.count(1)


def new_token() -> str:
    """A fresh fencing token, ``"<16 hex>.<n>"``; thread-safe."""
    return f"{_prefix}.{next(_counter)}"


def _after_fork_in_child() -> None:
    global _prefix, _counter
    _prefix = secrets.token_hex(8)
    _counter = itertools.count(1)


os.register_at_fork(after_in_child=_after_fork_in_child)
