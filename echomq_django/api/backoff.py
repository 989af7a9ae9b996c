"""Backoff policies: a pure function of (policy, attempts) to a delay in ms.

Policies are tuples (docs/protocol.md, "Backoff"; seed 001, "Backoff is a curve
computed above the wire"):

- ``("fixed", ms)``: ``ms`` on every attempt.
- ``("exponential", base, cap)``: ``min(base * 2**(attempts - 1), cap)``.
- ``("jitter", inner)``: a uniform integer in ``[0, inner's delay]`` (full jitter).

The host computes the delay; the retry script takes a literal ``delay_ms``.
"""

from __future__ import annotations

import random
import reprlib

from ..rules import MAX_MS, check_int, is_int

_rng = random.SystemRandom()

#: How many policies deep ``("jitter", ...)`` may wrap: jitter over jitter
#: only narrows the draw, so real policies stop at 2; the bound keeps a
#: policy from settings or code from being walked thousands of levels deep.
MAX_BACKOFF_DEPTH = 8


def check_backoff(policy: object) -> tuple:
    """Return the backoff ``policy`` as a tuple if it is valid (lists are
    accepted, and returned as tuples). The one argument rule kept beside what
    it governs rather than in :mod:`echomq_django.rules`: it is the policies'
    own grammar. Every parameter is ms in ``rules.MAX_MS`` (2**53) at most.

    Raises:
        ValueError: the policy's kind is unknown or a parameter breaks its rule
            (fixed ms in 0..2**53; exponential base and cap in 1..2**53; jitter
            one inner policy, nested at most MAX_BACKOFF_DEPTH (8) policies deep).
    """
    return _check(policy, 1)


def _ms(value: object, low: int) -> bool:
    return is_int(value) and low <= value <= MAX_MS


def _check(policy: object, depth: int) -> tuple:
    if depth > MAX_BACKOFF_DEPTH:
        raise ValueError(f"backoff policy nests ('jitter', inner) more than "
                         f"{MAX_BACKOFF_DEPTH} policies deep")
    if isinstance(policy, list):
        policy = tuple(policy)
    if not isinstance(policy, tuple) or not policy:
        raise ValueError(f"backoff policy must be a non-empty tuple, got {reprlib.repr(policy)}")
    kind, params = policy[0], policy[1:]
    if kind == "fixed":
        if len(params) != 1 or not _ms(params[0], 0):
            raise ValueError("backoff ('fixed', ms) needs an integer ms in 0..2**53, "
                             f"got {reprlib.repr(policy)}")
    elif kind == "exponential":
        if len(params) != 2 or not all(_ms(p, 1) for p in params):
            raise ValueError("backoff ('exponential', base, cap) needs integers base and cap "
                             f"in 1..2**53, got {reprlib.repr(policy)}")
    elif kind == "jitter":
        if len(params) != 1:
            raise ValueError("backoff ('jitter', inner) needs one inner policy, "
                             f"got {reprlib.repr(policy)}")
        return ("jitter", _check(params[0], depth + 1))
    else:
        raise ValueError("backoff policy kind must be 'fixed', 'exponential' or 'jitter', "
                         f"got {reprlib.repr(kind)}")
    return policy


#: The name this module exported before the rule moved here from rules.py.
validate = check_backoff


class Backoff:
    """Backoff policies and their delays. Stateless; every method is pure but jitter."""

    @staticmethod
    def delay_ms(policy: tuple, attempts: int) -> int:
        """Return the delay in ms before retrying after failed attempt ``attempts``.

        ``attempts`` counts from 1 (the first failure). Exponential never builds
        ``2**attempts`` for large attempts: once the doubling passes the cap the
        cap is returned, so attempts of 10**6 cost the same as attempts of 3.

        Raises:
            ValueError: ``attempts`` is not an integer >= 1 or the policy is invalid.
        """
        try:
            check_int("attempts", attempts, 1)
        except TypeError as err:
            raise ValueError(str(err)) from None
        policy = check_backoff(policy)
        return _delay(policy, attempts)

    @staticmethod
    def fixed(ms: int) -> tuple:
        """The policy ``("fixed", ms)``; ``ms`` >= 0."""
        return check_backoff(("fixed", ms))

    @staticmethod
    def exponential(base_ms: int, cap_ms: int, *, jitter: bool = False) -> tuple:
        """The policy ``min(base_ms * 2**(attempts-1), cap_ms)``, optionally full-jittered."""
        policy = check_backoff(("exponential", base_ms, cap_ms))
        return ("jitter", policy) if jitter else policy


def _delay(policy: tuple, attempts: int) -> int:
    kind = policy[0]
    if kind == "fixed":
        return policy[1]
    if kind == "exponential":
        base, cap = policy[1], policy[2]
        # base * 2**(attempts-1) exceeds cap as soon as the shift passes cap's
        # bit length, so a shift never needs to be wider than that.
        shift = attempts - 1
        if shift >= cap.bit_length():
            return cap
        return min(base << shift, cap)
    bound = _delay(policy[1], attempts)
    return 0 if bound <= 0 else _rng.randint(0, bound)
