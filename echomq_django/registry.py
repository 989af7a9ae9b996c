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


_SETTING_KEYS = {"job", "args", "kwargs", "queue", "every_ms", "cron", "tz", "missed",
                 "start_at_ms", "template"}


def declared_schedules(settings_schedules: dict) -> list[dict]:
    """Every recurring schedule declared in code (``@job(every=...)`` /
    ``@job(cron=...)``) and in ``ECHOMQ["SCHEDULES"]``, as
    :func:`echomq_django.repeat.sync` takes them.

    A settings entry is ``name -> {"job": dotted path, "args": [...],
    "kwargs": {...}, "queue": "default", "every_ms": ms | "cron": "...",
    "tz": zone, "missed": "coalesce" | "skip", "start_at_ms": ms}``; ``job``
    may be replaced by a whole ``template`` dict. See docs/repeat.md.

    Raises:
        ValueError, TypeError: a settings entry with unknown keys or without
            ``job``/``template``, naming the entry.
    """
    declared = [fn.schedule for fn in all_jobs() if fn.schedule]
    for name, spec in settings_schedules.items():
        where = f"ECHOMQ['SCHEDULES'][{name!r}]"
        if not isinstance(spec, dict):
            raise TypeError(f"{where} must be a dict, got {type(spec).__name__}")
        unknown = set(spec) - _SETTING_KEYS
        if unknown:
            raise ValueError(f"{where} has unknown keys {sorted(unknown)}; known: "
                             f"{sorted(_SETTING_KEYS)}")
        if ("job" in spec) == ("template" in spec):
            raise ValueError(f"{where} needs exactly one of 'job' (a dotted path) and 'template'")
        template = spec.get("template") or {
            "job": spec["job"], "args": spec.get("args", []), "kwargs": spec.get("kwargs", {})}
        declared.append({
            "queue": spec.get("queue", "default"), "name": name, "template": template,
            **{k: spec[k] for k in ("every_ms", "cron", "tz", "missed", "start_at_ms") if k in spec},
        })
    return declared
