"""The argument rules, in one place: ints and ms ranges, run-at instants, text,
JSON values, names, ids, queue names, key text, scores.

Every public surface checks its arguments with these before anything is
written: a wrong type raises ``TypeError``, a value outside its rule
``ValueError``, and the message names the argument and the rule it broke
(``"lease_ms must be in 1..9007199254740992, got 0"``).

The same rules are stated in docs/protocol.md ("Arguments"); the Lua scripts
re-check what they are given (a client other than ours may call them). The
grammars of backoff policies and queue limits live in api/backoff.py, limits.py.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from typing import Any

from .exceptions import PayloadError, PayloadTooLargeError

__all__ = [
    "MAX_MS", "MIN_RUN_AT_MS", "MAX_JSON_DEPTH", "QUEUE_NAME_PATTERN", "QUEUE_NAME_RULE",
    "JOB_ID_RULE", "is_int", "check_int", "check_ms", "optional_count", "check_bool",
    "check_text", "storable_text", "check_str", "check_queue_name", "check_job_id",
    "check_schedule_name", "to_ms", "check_run_at_ms", "to_run_at_ms", "check_payload_text",
    "check_json_value", "json_text", "PRIORITY_MIN", "PRIORITY_MAX", "check_priority",
    "check_group", "check_key_text", "check_score", "check_seconds",
]

#: The largest ms value anywhere (an instant, a delay or a lease): 2**53, the
#: largest integer a Lua number (a double) holds exactly.
MAX_MS = 2**53
#: The earliest run-at an instant may name: 2000-01-01T00:00:00Z in Unix ms.
#: An earlier one is a unit mistake, not a wish: Unix *seconds* for now (about
#: 1.7e9) read as ms fall in January 1970, and the job would run at once.
MIN_RUN_AT_MS = 946_684_800_000
_ONE_MS = dt.timedelta(milliseconds=1)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)

#: The queue-name rule as a regular expression (URL patterns reuse it).
QUEUE_NAME_PATTERN = r"[A-Za-z0-9._-]{1,100}"
_QUEUE_NAME = re.compile(QUEUE_NAME_PATTERN)
QUEUE_NAME_RULE = "1-100 characters of [A-Za-z0-9._-]"
_JOB_ID = re.compile(r"[A-Za-z0-9._-]{1,200}")
JOB_ID_RULE = "1-200 characters of [A-Za-z0-9._-]"
_SCHEDULE_NAME = re.compile(r"\S{1,200}")

#: How deep a JSON value may nest lists and dicts (``[]`` is 1 deep, ``[[1]]``
#: 2). Real data stays far below it; it keeps every reader well inside its own
#: limit: Python's json gives up near 1,000 levels (the recursion limit, shared
#: with the caller's stack), serde_json at 128, and a ``@job`` envelope adds
#: two levels to its arguments.
MAX_JSON_DEPTH = 100
# Marks, on the walk's stack, the end of a container's children.
_LEAVE = object()


def is_int(value: object) -> bool:
    """True for an int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_int(name: str, value: object, low: int, high: int = MAX_MS) -> int:
    """Return ``value`` if it is an int in ``low..high``.

    Raises:
        TypeError: ``value`` is not an int (bools are not ints here).
        ValueError: ``value`` is outside ``low..high``.
    """
    if not is_int(value):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be in {low}..{high}, got {value}")
    return value


def check_ms(name: str, value: object, low: int = 0) -> int:
    """An int of ms in ``low..MAX_MS`` (see :func:`check_int`)."""
    return check_int(name, value, low)


def optional_count(name: str, value: object) -> int | None:
    """None, or an int in ``1..MAX_MS`` (counts and ms alike): TypeError for
    another type (bools included), ValueError outside the range."""
    if value is None:
        return None
    if not is_int(value):
        raise TypeError(f"{name} must be an int >= 1, got {type(value).__name__}")
    return check_int(name, value, 1)


def check_bool(name: str, value: object) -> bool:
    """Return ``value`` if it is a bool (not 0, 1 or "yes"); else TypeError."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool (True or False), got {value!r}")
    return value


def _utf8(name: str, text: str) -> bytes:
    # Redis stores bytes: a lone surrogate ("\ud800", what surrogateescape
    # leaves for undecodable bytes) has no UTF-8 form, and redis-py would fail
    # with a UnicodeEncodeError that names nothing.
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(f"{name} must be text UTF-8 can encode; it has a lone surrogate "
                         f"{text[err.start]!r} at index {err.start}") from None


def check_text(name: str, value: object) -> str:
    """Return ``value`` if it is a str (empty allowed) that UTF-8 can encode:
    TypeError for another type, ValueError for a lone surrogate such as
    ``"\\ud800"`` (the message gives its index)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    _utf8(name, value)
    return value


def storable_text(text: str) -> str:
    """``text`` with each lone surrogate written as its escape (the one
    character ``"\\udcff"`` becomes the six characters ``\\udcff``), so
    :func:`check_text` accepts it. For text nobody chose, such as a handler's
    traceback, which must be recorded rather than refused."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def check_str(name: str, value: object) -> str:
    """A non-empty str that UTF-8 can encode (:func:`check_text`): TypeError
    for another type or "", ValueError for a lone surrogate."""
    if not isinstance(value, str) or not value:
        raise TypeError(f"{name} must be a non-empty str, got {value!r}")
    return check_text(name, value)


def check_queue_name(queue: object) -> str:
    """Return ``queue`` if it is a valid queue name: 1-100 characters of
    ``[A-Za-z0-9._-]`` (it sits inside key names and a Cluster hash tag, so
    braces, colons and spaces are refused).

    Raises:
        TypeError: not a str (``5``, ``None``, ``b"mail"``).
        ValueError: a str that breaks the rule; the message names the rule.
    """
    if not isinstance(queue, str):
        raise TypeError(f"queue name must be a str of {QUEUE_NAME_RULE}, "
                        f"got {type(queue).__name__}")
    if not _QUEUE_NAME.fullmatch(queue):
        raise ValueError(f"queue name must be {QUEUE_NAME_RULE}, got {queue!r}")
    return queue


def check_job_id(job_id: object, name: str = "job_id") -> str:
    """Return ``job_id`` if it is 1-200 characters of ``[A-Za-z0-9._-]`` (the
    ``JOB`` namespace is the admission scripts' rule, EMQKIND, not this one).

    Raises:
        TypeError: not a str.
        ValueError: breaks the character or length rule.
    """
    if not isinstance(job_id, str):
        raise TypeError(f"{name} must be a str, got {type(job_id).__name__}")
    if not _JOB_ID.fullmatch(job_id):
        raise ValueError(f"{name} must be {JOB_ID_RULE}, got {job_id!r}")
    return job_id


#: The priority range: Django's (``django.tasks``), higher first.
PRIORITY_MIN, PRIORITY_MAX = -100, 100


def check_priority(priority: object) -> int:
    """Return ``priority`` if it is an int in -100..100 (higher is served
    first): TypeError for another type, ValueError outside the range."""
    return check_int("priority", priority, PRIORITY_MIN, PRIORITY_MAX)


def check_group(group: object) -> str | None:
    """Return ``group`` (a lane's name, inside key names) if it is None or
    :func:`check_key_text` with ``in_tag``; "" is refused. TypeError for a
    value that is not a str or None, ValueError for one that breaks the rule."""
    if group is None:
        return None
    if not isinstance(group, str):
        raise TypeError(f"group must be a str or None, got {type(group).__name__}")
    return check_key_text("group", group, in_tag=True)


def check_key_text(name: str, value: object, *, in_tag: bool = False) -> str:
    """Return ``value`` if it is 1-200 bytes of UTF-8: text that names a key or
    a member of one. ``in_tag``: it sits inside EchoMQ's key names (a lane's
    group, a rate limiter's key), so whitespace and braces, which would make or
    cut a Cluster hash tag, are refused too.

    Raises:
        TypeError: not a str.
        ValueError: breaks the rule (a lone surrogate included).
    """
    size = len(_utf8(name, check_text(name, value)))
    if not 1 <= size <= 200 or in_tag and any(c.isspace() or c in "{}" for c in value):
        rule = " without whitespace or braces" if in_tag else ""
        shown = repr(value) if size <= 200 else f"{size} bytes"
        raise ValueError(f"{name} must be 1-200 bytes of UTF-8{rule}, got {shown}")
    return value


def check_score(name: str, value: object) -> float:
    """Return ``value`` as a float if it is a finite number: a float (not NaN
    nor an infinity) or an int in -2**53..2**53, which a sorted set's score (a
    double) holds exactly. TypeError for another type (bools included),
    ValueError for a number that breaks the rule."""
    if not is_int(value) and not isinstance(value, float):
        raise TypeError(f"{name} must be an int or a float, got {type(value).__name__}")
    if not (math.isfinite(value) if isinstance(value, float) else abs(value) <= MAX_MS):
        raise ValueError(f"{name} must be a finite number (ints within 2**53), got {value!r}")
    return float(value)


def check_seconds(name: str, value: object, *, above_zero: bool = False) -> float:
    """``value`` as float seconds: a finite number (:func:`check_score`'s rule;
    TypeError for another type) >= 0, or > 0 with ``above_zero`` (ValueError)."""
    seconds = check_score(name, value)
    if seconds < 0 or above_zero and seconds == 0:
        raise ValueError(f"{name} must be {'> 0' if above_zero else '>= 0'} seconds, "
                         f"got {value!r}")
    return seconds


def check_schedule_name(name: object) -> str:
    """Return ``name`` if it is a valid recurring schedule name: 1-200
    printable characters without whitespace.

    Raises:
        TypeError: not a str.
        ValueError: breaks the rule.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    if not _SCHEDULE_NAME.fullmatch(name) or not name.isprintable():
        raise ValueError(f"name must be 1-200 printable characters without whitespace, "
                         f"got {name!r}")
    return name


def to_ms(name: str, value: Any, low: int | None = None) -> int:
    """A ``timedelta`` or an int of ms, as an int of ms. A timedelta is rounded
    down to whole ms (``timedelta(microseconds=1500)`` is 1), so a negative
    one stays negative (``timedelta(microseconds=-1)`` is -1, never 0). With
    ``low``, a value below ``low`` ms raises, whatever its unit.

    Raises:
        TypeError: neither a timedelta nor an int.
        ValueError: below ``low`` (the message gives the value in ms).
    """
    if isinstance(value, dt.timedelta):
        ms, shown = value // _ONE_MS, f"{value / _ONE_MS!r} ms"
    elif is_int(value):
        ms, shown = value, f"{value} ms"
    else:
        raise TypeError(f"{name} must be a timedelta or an int of ms, got {type(value).__name__}")
    if low is not None and ms < low:
        raise ValueError(f"{name} must be >= {low} ms, got {shown}")
    return ms


def check_run_at_ms(name: str, value: object) -> int:
    """Return ``value`` if it is an int of Unix ms in ``MIN_RUN_AT_MS..MAX_MS``
    (2000-01-01 to 2**53).

    Raises:
        TypeError: not an int (bools are not ints here).
        ValueError: before 2000-01-01 (the message says the unit is ms and,
            for a value that reads as Unix seconds, that it looks like
            seconds: 2000..2100 read as Unix seconds), or past ``MAX_MS``.
    """
    if is_int(value) and value < MIN_RUN_AT_MS:
        # 946684800..4102444800 read as Unix seconds is 2000..2100.
        hint = ", which looks like seconds" if 946_684_800 <= value < 4_102_444_800 else ""
        raise ValueError(f"{name} must be Unix milliseconds (>= {MIN_RUN_AT_MS}, 2000-01-01); "
                         f"got {value}{hint}")
    return check_int(name, value, MIN_RUN_AT_MS)


def to_run_at_ms(name: str, value: Any) -> int:
    """A timezone-aware ``datetime`` or an int of Unix ms, as Unix ms (a
    datetime is rounded down to whole ms), checked by :func:`check_run_at_ms`.

    Raises:
        TypeError: neither a datetime nor an int.
        ValueError: a naive datetime; an instant before 2000-01-01 or past
            ``MAX_MS``.
    """
    if isinstance(value, dt.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"{name} must be a timezone-aware datetime (or Unix ms), "
                             f"got naive {value.isoformat()}")
        ms = (value - _EPOCH) // _ONE_MS
        if ms < MIN_RUN_AT_MS:
            raise ValueError(f"{name} must be 2000-01-01T00:00:00Z or later, "
                             f"got {value.isoformat()}")
        return check_int(name, ms, MIN_RUN_AT_MS)
    if is_int(value):
        return check_run_at_ms(name, value)
    raise TypeError(f"{name} must be an aware datetime or an int of Unix ms, "
                    f"got {type(value).__name__}")


def check_json_value(name: str, value: object, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Raise unless the lists, tuples and dicts in ``value`` nest at most
    ``max_depth`` deep, none contains itself, and every str in it (keys
    included) is :func:`check_text` (no lone surrogate: no UTF-8 form); the
    other types are :func:`echomq_django.api.payload.check_json`'s rule. The
    walk keeps its own stack: any depth is reported, never a RecursionError,
    and a cycle is found instead of walked forever.

    Raises:
        PayloadError (a TypeError): ``"<name> is nested deeper than 100 levels
            of lists and dicts"``, ``"<name>[0] contains itself (again at
            <name>[0][1])"``.
        ValueError: a lone surrogate, naming where (``"<name>[0]['k'] must be
            text UTF-8 can encode; ..."``, ``"a key of <name>[0] ..."``).
    """
    if isinstance(value, str):
        _utf8(name, value)
    stack = [(value, name, 1)]
    enclosing: dict[int, str] = {}  # id -> path of the containers around the walk
    while stack:
        item, path, depth = stack.pop()
        if item is _LEAVE:
            del enclosing[path]  # here ``path`` holds the container's id
            continue
        if isinstance(item, dict):
            children = item.items()
        elif isinstance(item, (list, tuple)):
            children = enumerate(item)
        else:
            continue
        if id(item) in enclosing:
            raise PayloadError(f"{enclosing[id(item)]} contains itself (again at {path}); "
                               "JSON cannot hold a cycle")
        if depth > max_depth:
            raise PayloadError(f"{name} is nested deeper than {max_depth} levels of lists "
                               "and dicts")
        enclosing[id(item)] = path
        stack.append((_LEAVE, id(item), 0))
        for key, child in children:
            if isinstance(key, str) and not key.isascii():
                _utf8(f"a key of {path}", key)
            if isinstance(child, str) and not child.isascii():
                _utf8(f"{path}[{key!r}]", child)
            elif isinstance(child, (dict, list, tuple)):
                stack.append((child, f"{path}[{key!r}]", depth + 1))


def json_text(name: str, value: Any) -> str:
    """``value`` as compact JSON text.

    Raises:
        TypeError: ``value`` is not JSON-serialisable (NaN and Infinity
            included), nests too deep or contains itself.
        ValueError: a str in it holds a lone surrogate (:func:`check_json_value`).
    """
    check_json_value(name, value)
    try:
        return json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must be JSON-serialisable: {err}") from None


def _no_constant(name: str) -> None:
    raise ValueError(f"JSON has no {name}")


def check_payload_text(payload: object, max_bytes: int) -> str:
    """Return ``payload`` if it is JSON text of at most ``max_bytes`` bytes of
    UTF-8 (NaN and Infinity are not JSON; lone surrogates have no UTF-8 form,
    see :func:`check_text`).

    Raises:
        TypeError: not a str.
        ValueError: it holds a lone surrogate, is not valid JSON text, or is
            nested deeper than Python's parser goes (about 1,000 levels).
        PayloadTooLargeError (a ValueError): over ``max_bytes``.
    """
    if not isinstance(payload, str):
        raise TypeError(f"payload must be JSON text (str), got {type(payload).__name__}")
    size = len(_utf8("payload", payload))
    if size > max_bytes:
        raise PayloadTooLargeError(f"payload is {size} bytes; the limit is {max_bytes}")
    try:
        json.loads(payload, parse_constant=_no_constant)
    except ValueError as err:
        raise ValueError(f"payload must be valid JSON text: {err}") from None
    except RecursionError:
        raise ValueError("payload must be JSON text Python can parse: nested too deep") from None
    return payload
