"""The workshop game's scoring (seed 004, move 5: codemojex's ``Scoring``).

A round's secret is six distinct emoji in order; a guess is six distinct emoji.
Each guessed emoji that is in the secret earns ``100 - 20 * d`` points, where
``d`` is how far its guessed position is from its secret position (0..5, so
100 down to 0); an emoji not in the secret earns nothing. A guess totals at
most ``MAX_POINTS`` (600). The leaderboard keeps each player's best total
(``echomq_django.Board``); the percentage is computed when it is read, never
stored.

The rule is the game's, not the queue's, so it lives with the example; the
library's ``Board`` ranks any score.
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["SLOTS", "MAX_POINTS", "points", "percentage"]

#: Positions in a secret and in a guess.
SLOTS = 6
#: The best total: every emoji in its place.
MAX_POINTS = 100 * SLOTS


def _emoji(name: str, value: Sequence[str]) -> list[str]:
    # A str would split a multi-code-point emoji (a flag, a ZWJ sequence), so
    # a guess must come as a sequence of emoji.
    if isinstance(value, str) or not all(isinstance(e, str) and e for e in value):
        raise TypeError(f"{name} must be a sequence of {SLOTS} emoji (non-empty str)")
    emoji = list(value)
    if len(emoji) != SLOTS or len(set(emoji)) != SLOTS:
        raise ValueError(f"{name} must be {SLOTS} distinct emoji, got {emoji!r}")
    return emoji


def points(guess: Sequence[str], secret: Sequence[str]) -> int:
    """The total of ``guess`` against ``secret``, 0..600 (see the module doc).

    Raises:
        TypeError: either is a str or holds something other than non-empty str.
        ValueError: either is not six distinct emoji.
    """
    where = {e: i for i, e in enumerate(_emoji("secret", secret))}
    return sum(100 - 20 * abs(i - where[e])
               for i, e in enumerate(_emoji("guess", guess)) if e in where)


def percentage(total: int | float) -> int:
    """``round(total / 600 * 100)``, halves rounded up (as the seed's Elixir
    ``round`` does for these non-negative totals), for a total read off the board."""
    return int(total * 100 / MAX_POINTS + 0.5)
