"""Branded, mint-ordered ids: ``JOB01JD7...``.

An id is a namespace prefix (upper-case letters, e.g. ``JOB``, ``USR``, ``NOT``)
followed by a 26-character ULID-shaped suffix in Crockford base32: 10
characters of Unix time in milliseconds, then 16 of an 80-bit value that is
random at the first mint of each millisecond and incremented by one for every
further mint in the same millisecond. Crockford's alphabet is in ASCII order,
so byte order equals mint order within a process and millisecond order across
processes. Pending is served in byte order (ZPOPMIN at score 0), which makes
claim order equal mint order (docs/protocol.md, "Ordering").

The generator's state (the last millisecond and counter, and the lock that
guards them) is per process: a forked child starts afresh
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


def _encode(value: int, width: int) -> str:
    chars = []
    for _ in range(width):
        value, digit = divmod(value, 32)
        chars.append(_ALPHABET[digit])
    return "".join(reversed(chars))


class BrandedId:
    """Mint and read branded ids. Thread-safe; fork-safe (a forked child
    starts with fresh state, see the module doc)."""

    _lock = threading.Lock()
    _last_ms = -1
    _last_rand = 0

    @classmethod
    def generate(cls, namespace: str = "JOB") -> str:
        """Mint a new id: ``namespace`` + 26 characters (see the module doc).

        Raises:
            ValueError: ``namespace`` is not 1-16 upper-case ASCII letters.
        """
        if not isinstance(namespace, str) or not _NAMESPACE.fullmatch(namespace):
            raise ValueError(
                f"namespace must be 1-16 upper-case letters A-Z, got {namespace!r}"
            )
        with cls._lock:
            now_ms = time.time_ns() // 1_000_000
            if now_ms <= cls._last_ms:
                # Same millisecond (or the wall clock stepped back): keep the
                # last time and count up, so byte order still follows mint order.
                now_ms = cls._last_ms
                rand = cls._last_rand + 1
                if rand >> _RANDOM_BITS:
                    now_ms += 1
                    rand = secrets.randbits(_RANDOM_BITS - 1)
            else:
                # Leave the top bit clear so the counter has 2^79 steps of room.
                rand = secrets.randbits(_RANDOM_BITS - 1)
            cls._last_ms, cls._last_rand = now_ms, rand
        return namespace + _encode(now_ms, 10) + _encode(rand, 16)

    @classmethod
    def _reset_after_fork(cls) -> None:
        # The child inherited the parent's last millisecond and counter: minted
        # in the same millisecond, its next id would equal the parent's next.
        # A fresh random start per process avoids that; a fresh lock replaces
        # one a parent thread may have held at the fork.
        cls._lock = threading.Lock()
        cls._last_ms = -1
        cls._last_rand = 0

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
