"""The jobs this process may run: dotted path -> JobFunction (no schedule logic here).

Filled by ``@job`` at import time (``jobs.py`` modules of installed apps are
autodiscovered by the app config). The worker looks job paths up here and
never imports a module named by a payload, so a payload can only run code that
a ``@job`` already registered.
"""

from __future__ import annotations

from typing import Any

__all__ = ["register", "lookup", "resolve", "add_resolver", "all_jobs", "schedules"]

# path -> JobFunction. Typed loosely on purpose: this module is the bottom of
# the api package and imports nothing of it.
_jobs: dict[str, Any] = {}
# Callables path -> job or None, asked for a path nothing registered: how an
# integration finds its own jobs (the django.tasks backend imports a Task by
# path from an installed app's module).
_resolvers: list[Any] = []


def register(fn: Any) -> None:
    """Add the JobFunction ``fn`` under ``fn.path``; re-registering the same
    path replaces it."""
    _jobs[fn.path] = fn


def lookup(path: str) -> Any:
    """Return the JobFunction registered at ``path``, or None."""
    return _jobs.get(path)


def add_resolver(resolver: Any) -> None:
    """Let ``resolver(path)`` find jobs nothing registered (see :func:`resolve`)."""
    if resolver not in _resolvers:
        _resolvers.append(resolver)


def resolve(path: str) -> Any:
    """:func:`lookup`, then each resolver in turn; None when none knows ``path``."""
    found = _jobs.get(path)
    for resolver in _resolvers:
        if found is not None:
            break
        found = resolver(path)
    return found


def all_jobs() -> list[Any]:
    """Every registered job, sorted by path."""
    return [_jobs[p] for p in sorted(_jobs)]


def schedules() -> list[dict]:
    """The recurring declarations of every registered ``@job(every=/cron=)``
    (``JobFunction.schedule``), sorted by path; what
    :func:`echomq_django.repeat.sync.declared_schedules` takes as code schedules."""
    return [fn.schedule for fn in all_jobs() if fn.schedule]
