"""Branded, mint-ordered ids: ``JOB01JD7...``.

An id is a namespace prefix (upper-case letters, e.g. ``JOB``, ``USR``, ``NOT``)
followed by a 26-character ULID-shaped suffix in Crockford base32: 10
characters of Unix time in milliseconds, then 16 of an 80-bit value that is
random at the first mint of each millisecond and incremented by one for every
further mint in the same millisecond. Crockford's alphabet is in ASCII order,
so byte order equals mint order within a process (ids of one namespace) and
millisecond order across processes. A lane serves jobs of equal priority in
byte order (ZPOPMIN breaks ties by member), which makes claim order equal
mint order (docs/protocol.md, "Ordering").

The time part comes from the mint clock the caller passes: EchoMQ passes the
server's now (:func:`echomq_django.protocol.clock.mint_now_ms`, this host's
clock plus an offset measured against the server's ``TIME``), so a producer
whose clock runs a minute fast or slow mints ids among everyone else's
instead of a minute behind or ahead of them. Without one, ``generate`` reads
this host's clock (``time.time_ns()``). Mint order within a process and
namespace holds whatever the times passed: a time at or before the last one
minted keeps the last one and counts up. So a process that mints some
``JOB`` ids on a host clock running ahead holds its server-clock ``JOB`` ids
at that time until the server catches up: pass the server's now for every
``JOB`` id. (Other namespaces keep their own state: a ``USR`` id minted on
the host clock holds no ``JOB`` id.)

The generator's state (per namespace, the last millisecond and counter; the
lock that guards them) is per process: a forked child starts afresh
(``os.register_at_fork``), so parent and child never mint the same next id,
and a lock some parent thread held at the fork cannot block the child.
"""

from __future__ import annotations

import os
import re
import secrets
import threading
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_SUFFIX_LEN = 26
_NAMESPACE = re.compile(r"[A-Z]{1,16}")
_RANDOM_BITS = 80
_MAX_MS = 1 << 48  # ULID's time range (10 base32 characters hold 50 bits)


# Every pair of digits, by the 10-bit value it writes: 13 lookups write the
# 26 characters (130 bits), a few times faster than one divmod per digit.
_PAIRS = tuple(a + b for a in _ALPHABET for b in _ALPHABET)
_PAIR_SHIFTS = tuple(range(120, -1, -10))


def _suffix(ms: int, rand: int) -> str:
    """The 26 characters: 10 of ``ms`` and 16 of ``rand``, most significant first."""
    value = (ms << _RANDOM_BITS) | rand
    return "".join([_PAIRS[(value >> shift) & 1023] for shift in _PAIR_SHIFTS])


class BrandedId:
    """Mint and read branded ids. Thread-safe; fork-safe (a forked child
    starts with fresh state, see the module doc)."""

    _lock = threading.Lock()
    # namespace -> (last ms, last counter). Mint order matters within a
    # namespace only: ids of two namespaces compare by their prefixes.
    _last: dict[str, tuple[int, int]] = {}

    @classmethod
    def generate(cls, namespace: str = "JOB", now_ms: int | None = None) -> str:
        """Mint a new id: ``namespace`` + 26 characters (see the module doc).

        ``now_ms``: the mint time in Unix ms, normally the server's
        (:func:`~echomq_django.protocol.clock.mint_now_ms`); None reads this
        host's clock. The id's time part is ``now_ms``, or the last one this
        process minted in ``namespace`` if that is later.

        Raises:
            ValueError: ``namespace`` is not 1-16 upper-case ASCII letters, or
                ``now_ms`` is outside 0..2**48 - 1.
            TypeError: ``now_ms`` is neither None nor an int.
        """
        if namespace != "JOB" and (not isinstance(namespace, str)
                                   or not _NAMESPACE.fullmatch(namespace)):
            raise ValueError(
                f"namespace must be 1-16 upper-case letters A-Z, got {namespace!r}"
            )
        if now_ms is not None:
            if type(now_ms) is not int:  # bools are not times
                raise TypeError(f"now_ms must be an int, got {type(now_ms).__name__}")
            if not 0 <= now_ms < _MAX_MS:
                raise ValueError(f"now_ms must be in 0..2**48 - 1, got {now_ms}")
        with cls._lock:
            if now_ms is None:
                now_ms = time.time_ns() // 1_000_000
            last_ms, last_rand = cls._last.get(namespace, (-1, 0))
            if now_ms <= last_ms:
                # Same millisecond, or the clock (or the offset to the
                # server's) stepped back: keep the last time and count up, so
                # byte order still follows mint order.
                now_ms = last_ms
                rand = last_rand + 1
                if rand >> _RANDOM_BITS:
                    now_ms += 1
                    rand = secrets.randbits(_RANDOM_BITS - 1)
            else:
                # Leave the top bit clear so the counter has 2^79 steps of room.
                rand = secrets.randbits(_RANDOM_BITS - 1)
            cls._last[namespace] = (now_ms, rand)
        return namespace + _suffix(now_ms, rand)

    @classmethod
    def _reset_after_fork(cls) -> None:
        # The child inherited the parent's last millisecond and counter: minted
        # in the same millisecond, its next id would equal the parent's next.
        # A fresh random start per process avoids that; a fresh lock replaces
        # one a parent thread may have held at the fork.
        cls._lock = threading.Lock()
        cls._last = {}

    @staticmethod
    def namespace(branded_id: str) -> str:
        """Return the prefix of ``branded_id`` (``"JOB"`` for a job id).

        Raises:
            ValueError: ``branded_id`` is not a namespace followed by a
                26-character Crockford base32 suffix.
        """
        if (
            not isinstance(branded_id, str)
            or len(branded_id) <= _SUFFIX_LEN
            or any(c not in _ALPHABET for c in branded_id[-_SUFFIX_LEN:])
            or not _NAMESPACE.fullmatch(branded_id[:-_SUFFIX_LEN])
        ):
            raise ValueError(f"not a branded id: {branded_id!r}")
        return branded_id[:-_SUFFIX_LEN]

    @staticmethod
    def timestamp_ms(branded_id: str) -> int:
        """Return the mint time (Unix ms) encoded in ``branded_id``.

        Raises:
            ValueError: as :meth:`namespace`.
        """
        BrandedId.namespace(branded_id)
        value = 0
        for c in branded_id[-_SUFFIX_LEN:-16]:
            value = value * 32 + _ALPHABET.index(c)
        return value


os.register_at_fork(after_in_child=BrandedId._reset_after_fork)
