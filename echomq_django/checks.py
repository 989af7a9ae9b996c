"""System checks for the ``ECHOMQ`` setting (tag ``echomq``).

Usage: ``manage.py check`` runs them; ``manage.py check --tag echomq`` runs
only these. Each problem :func:`echomq_django.conf.validate` finds becomes a
``django.core.checks.Error`` with its stable id (``echomq.E001`` ...
``echomq.E010``; the list is in :mod:`echomq_django.conf`), and
``echomq.E011`` for an invalid recurring schedule, ``echomq.E013`` for one
naming an unregistered job and ``echomq.E014`` for one whose occurrences
would call their job with arguments it cannot take (:func:`check_schedules`).
"""

from __future__ import annotations

from typing import Any

from django.core.checks import Error, register

from .conf import validate

__all__ = ["check_settings"]

_MISSING = object()


@register("echomq")
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Return one Error per problem in ``settings.ECHOMQ`` (empty when valid or absent)."""
    from django.conf import settings

    raw = getattr(settings, "ECHOMQ", _MISSING)
    if raw is _MISSING:
        return []
    return [
        Error(message, obj=f"settings.ECHOMQ[{key!r}]" if key else "settings.ECHOMQ", id=check_id)
        for check_id, key, message in validate(raw)
    ]


@register("echomq")
def check_schedules(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """``echomq.E011``: a recurring schedule declared with ``@job(every=/cron=)``
    or in ``ECHOMQ["SCHEDULES"]`` is invalid (bad cron, unknown zone, ...).
    Runs the same validation as runechomq's boot-time sync; writes nothing.

    ``echomq.E013``: a SCHEDULES entry names a job no ``@job`` registered.
    ``echomq.E014``: a schedule's occurrences would call its registered job
    with arguments its signature refuses (a SCHEDULES entry's ``args`` and
    ``kwargs``; a recurring ``@job`` is checked at decoration already, where
    occurrences pass none): every occurrence would fail until dead."""
    from .api import registry
    from .conf import get_config
    from .exceptions import ConfigurationError
    from .repeat.sync import declared_schedules, plan

    try:
        schedules = get_config().schedules
    except ConfigurationError:
        return []  # Reported by check_settings.
    code = list(registry.schedules())
    try:
        declared = declared_schedules(code, schedules)
        plan(declared)
    except (TypeError, ValueError) as err:
        return [Error(f"recurring schedule: {err}", obj="settings.ECHOMQ['SCHEDULES']",
                      id="echomq.E011")]
    errors = []
    for name, spec in schedules.items():
        path = spec.get("job")
        if path is not None and registry.lookup(path) is None:
            errors.append(Error(
                f"SCHEDULES[{name!r}] names job {path!r}, which no @job registered: every "
                "occurrence would go dead with reason 'unknown job'",
                hint="Check the dotted path, and that its module is an installed app's jobs.py "
                     "or is imported at start-up.",
                obj=f"settings.ECHOMQ['SCHEDULES'][{name!r}]", id="echomq.E013"))
    for index, item in enumerate(declared):
        error = _arguments_error(registry, item["template"])
        if error is not None:
            obj = (item["name"] if index < len(code)
                   else f"settings.ECHOMQ['SCHEDULES'][{item['name']!r}]")
            errors.append(Error(
                f"recurring schedule {item['name']!r}: {error}: every occurrence would fail "
                "until it is dead",
                hint="Give the schedule args/kwargs that fit the function, or give its "
                     "parameters defaults.",
                obj=obj, id="echomq.E014"))
    return errors


def _arguments_error(registry: Any, template: dict) -> str | None:
    """Why the worker could not call the job ``template`` names with its
    args and kwargs, or None (also when no ``@job`` is registered at the path:
    that is E013's, or a template for another client)."""
    path = template.get("job")
    fn = registry.lookup(path) if isinstance(path, str) else None
    if fn is None:
        return None
    args, kwargs = template.get("args", []), template.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        return (f"args must be a list and kwargs a dict, got {type(args).__name__} and "
                f"{type(kwargs).__name__}")
    try:
        fn.check_arguments(args, kwargs)
    except TypeError as err:
        return str(err)
    return None
