"""The jobs this process may run: dotted path -> JobFunction.

Filled by ``@job`` at import time (``jobs.py`` modules of installed apps are
autodiscovered by the app config). The worker looks job paths up here and
never imports a module named by a payload, so a payload can only run code that
a ``@job`` already registered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .decorators import JobFunction

_jobs: dict[str, "JobFunction"] = {}


def register(fn: "JobFunction") -> None:
    """Add ``fn`` under ``fn.path``; re-registering the same path replaces it."""
    _jobs[fn.path] = fn


def lookup(path: str) -> "JobFunction | None":
    """Return the registered job at ``path``, or None."""
    return _jobs.get(path)


def all_jobs() -> list["JobFunction"]:
    """Every registered job, sorted by path."""
    return [_jobs[p] for p in sorted(_jobs)]
