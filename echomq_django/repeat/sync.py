"""Boot-time sync: make the registry match the schedules declared in code and settings.

runechomq calls :func:`sync` once at start (docs/repeat.md, "sync");
:func:`plan` is its validation alone, which the ``echomq.E011`` system check
and ``@job`` at decoration run too.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable

from .. import rules
from ..protocol import scripts
from ..protocol.clock import server_now_ms
from ..protocol.keyspace import Keyspace
from .definition import Definition
from .pump import malformed
from .registry import Repeat

__all__ = ["declared_schedules", "plan", "sync"]

logger = logging.getLogger("echomq.repeat")

_SETTING_KEYS = {"job", "args", "kwargs", "queue", "every_ms", "cron", "tz", "missed",
                 "start_at_ms", "template"}


def declared_schedules(code_schedules: Iterable[dict], settings_schedules: dict) -> list[dict]:
    """Every recurring schedule declared in code and in settings, as
    :func:`sync` takes them.

    ``code_schedules``: the declarations of ``@job(every=...)`` /
    ``@job(cron=...)`` functions (``JobFunction.schedule``), passed in by the
    caller so this package never imports the developer's API.
    ``settings_schedules``: ``ECHOMQ["SCHEDULES"]``.

    A settings entry is ``name -> {"job": dotted path, "args": [...],
    "kwargs": {...}, "queue": "default", "every_ms": ms | "cron": "...",
    "tz": zone, "missed": "coalesce" | "skip", "start_at_ms": ms}``; ``job``
    may be replaced by a whole ``template`` dict. See docs/repeat.md.

    Raises:
        ValueError, TypeError: a settings entry with unknown keys or without
            ``job``/``template``, naming the entry.
    """
    found = list(code_schedules)
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
        found.append({
            "queue": spec.get("queue", "default"), "name": name, "template": template,
            **{k: spec[k] for k in ("every_ms", "cron", "tz", "missed", "start_at_ms") if k in spec},
        })
    return found


_DECLARED_KEYS = {"queue", "name", "every_ms", "cron", "tz", "template", "missed",
                  "start_at_ms"}


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


def plan(declared: Iterable[dict]) -> list[tuple[Keyspace, Definition]]:
    """Validate declared schedules without writing anything (what :func:`sync`
    does first, and what the ``echomq.E011`` system check runs).

    Returns ``[(Keyspace, definition), ...]`` in order.

    Raises:
        ValueError, TypeError: a bad declaration (naming the entry), or the
            same (queue, name) declared twice.
    """
    plans: list[tuple[Keyspace, Definition]] = []
    seen: set[tuple[str, str]] = set()
    for index, item in enumerate(declared):
        if not isinstance(item, dict):
            raise TypeError(f"declared[{index}] must be a dict, got {type(item).__name__}")
        unknown = set(item) - _DECLARED_KEYS
        if unknown:
            raise ValueError(f"declared[{index}] has unknown keys {sorted(unknown)}")
        try:
            ks = Keyspace(item.get("queue"))
            definition = Definition.build(
                item.get("name"), every_ms=item.get("every_ms"), cron=item.get("cron"),
                tz=item.get("tz"), template=_or(item.get("template"), {}),
                start_at_ms=item.get("start_at_ms"), missed=_or(item.get("missed"), "coalesce"))
        except (TypeError, ValueError) as err:
            raise type(err)(f"declared[{index}] ({item.get('name')!r}): {err}") from None
        key = (ks.queue, definition.name)
        if key in seen:
            raise ValueError(f"declared[{index}]: {key} is declared twice")
        seen.add(key)
        plans.append((ks, definition))
    return plans


def sync(conn, declared: Iterable[dict], *, prune: bool = False,
         queues: Iterable[str] = ()) -> dict[str, int]:
    """Make the registry match the declared schedules (docs/repeat.md, "sync").

    ``declared``: dicts with keys ``queue``, ``name``, ``every_ms`` or
    ``cron``, and optionally ``tz``, ``template`` (default ``{}``),
    ``missed``, ``start_at_ms`` (None means the default for each). Every entry is validated before anything is
    written. An unchanged name is untouched (its next run is kept); a changed
    one is upserted and logged; a name whose member or record was missing is
    written afresh (``repaired``). With ``prune=True`` the live names of the
    queues in ``declared`` or ``queues`` that are not declared are removed;
    without it they are counted as ``undeclared``. Registry members without a
    record in those queues, or whose name no schedule can have (``""``), are
    removed (``orphans``).

    Last, every one of those queues gets its sync marker
    (``emq:{q}:synced``, the server time), whose loss tells a running
    metronome to sync again (docs/repeat.md, "Lost registry").

    Returns counts: ``registered``, ``unchanged``, ``updated``, ``repaired``,
    ``removed``, ``undeclared``, ``orphans``.

    Raises:
        ValueError, TypeError: a bad declaration (naming the entry), or the
            same (queue, name) declared twice; nothing is written then.
    """
    plans = plan(declared)
    seen = {(ks.queue, definition.name) for ks, definition in plans}
    all_queues = {ks.queue for ks, _ in plans} | {rules.check_queue_name(q) for q in queues}

    counts = dict.fromkeys(("registered", "unchanged", "updated", "repaired", "removed",
                            "undeclared", "orphans"), 0)
    nows: dict[str, int] = {}  # the clock of each queue's node, read once
    for ks, definition in plans:
        if ks.queue not in nows:
            nows[ks.queue] = server_now_ms(conn, ks.queue)
        code = int(scripts.run(conn, "repeat/upsert",
                               [ks.repeat, ks.repeat_record(definition.name), ks.beat],
                               definition.argv(definition.cadence.first_run(nows[ks.queue]))))
        outcome = {1: "registered", 0: "unchanged", 2: "updated", 3: "repaired"}[code]
        counts[outcome] += 1
        if outcome != "unchanged":
            logger.info("repeat %s/%s: %s (%s)", ks.queue, definition.name, outcome,
                        definition.cadence.describe())

    repeat = Repeat(conn)
    for queue in sorted(all_queues):
        ks = Keyspace(queue)
        for name, score, raw in list(repeat.members(queue)):
            if (queue, name) in seen:
                continue
            if not raw or malformed(name):
                # A member without a record, or whose name no schedule can
                # have ("" say): nothing can run it, and remove() refuses it.
                if scripts.run(conn, "repeat/drop_member", [ks.repeat, ks.repeat_record(name)],
                               [name, int(score), raw.get("version", "")]):
                    counts["orphans"] += 1
                    logger.warning("repeat %s/%r: member %s removed", queue, name,
                                   "without a record" if not raw else "with a malformed name")
            elif prune:
                if repeat.remove(queue, name):
                    counts["removed"] += 1
                    logger.info("repeat %s/%s: removed (no longer declared)", queue, name)
            else:
                counts["undeclared"] += 1
                logger.info("repeat %s/%s: live but not declared (kept; prune to remove)",
                            queue, name)
        scripts.run(conn, "repeat/mark_synced", [ks.synced], [])
    return counts
