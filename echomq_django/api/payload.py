"""The JSON envelope a ``@job`` payload travels in.

``{"job": "<dotted path>", "args": [...], "kwargs": {...}}``. Only plain JSON
crosses the wire (STYLE principle 9: never pickle): ``None``, ``bool``,
``int``, finite ``float``, ``str``, ``list`` and ``dict`` with ``str`` keys,
nested at most :data:`~echomq_django.rules.MAX_JSON_DEPTH` (100) levels deep.
Anything else (a datetime, a Decimal, a model instance, a tuple, NaN, a dict
with non-str keys, a list that contains itself) raises in the caller, so what
a handler receives is exactly what was passed; so does a str (or key) with a
lone surrogate such as ``"\\ud800"``, which has no UTF-8 form. See
docs/protocol.md ("Arguments").
"""

from __future__ import annotations

import json
import json.encoder
import math
from typing import Any

from .. import rules
from ..exceptions import PayloadError, PayloadTooLargeError
from ..protocol.records import CheckedPayload


def _refuse(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not JSON")


def _envelope_encoder():
    """A compact JSON encoder made once (json.dumps makes one per call): C's
    when there is one. Its output is ASCII (``\\u`` escapes), so its length
    is its size in bytes. It skips json's cycle check: :func:`encode` walks
    every container first (:func:`check_json` finds cycles)."""
    c_make_encoder = getattr(json.encoder, "c_make_encoder", None)
    if c_make_encoder is None:
        return json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
    chunks = c_make_encoder(None, _refuse, json.encoder.encode_basestring_ascii, None,
                            ":", ",", False, False, False)
    return lambda value: "".join(chunks(value, 0))


_encode_json = _envelope_encoder()


def check_json(value: Any, where: str) -> None:
    """Raise PayloadError (a TypeError) naming ``where`` if ``value`` is not
    plain JSON, nests deeper than ``rules.MAX_JSON_DEPTH`` or contains itself;
    ValueError naming it if a str in it holds a lone surrogate
    (:func:`echomq_django.rules.check_json_value`)."""
    rules.check_json_value(where, value)
    stack = [(value, where)]
    while stack:
        item, path = stack.pop()
        if item is None or isinstance(item, (bool, int, str)):
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                raise PayloadError(f"{path} is {item!r}; JSON has no NaN or infinity")
            continue
        if isinstance(item, list):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(item))
            continue
        if isinstance(item, dict):
            for key, v in item.items():
                if not isinstance(key, str):
                    raise PayloadError(
                        f"{path} has a {type(key).__name__} key {key!r}; JSON keys must be str"
                    )
                stack.append((v, f"{path}[{key!r}]"))
            continue
        raise PayloadError(
            f"{path} is a {type(item).__name__}, which is not JSON "
            "(pass None, bool, int, float, str, list or dict with str keys)"
        )


def _plain(value: Any) -> bool:
    """True for a value that is JSON as it is and needs no walk: None, a
    bool, an int or an ASCII str (the common argument)."""
    kind = type(value)
    return kind is int or kind is bool or value is None or (kind is str and value.isascii())


def encode(job_path: str, args: tuple, kwargs: dict, max_bytes: int,
           extra: dict | None = None) -> CheckedPayload:
    """Return the envelope as JSON text, checked once: a
    :class:`~echomq_django.protocol.records.CheckedPayload`, which ``Jobs``
    sends without parsing it again. Non-ASCII text is written as ``\\u``
    escapes, so the text is ASCII. ``extra``: more top-level keys (a
    django.tasks Task's ``task`` marker and ``metadata``), checked as JSON.

    Raises:
        PayloadError (TypeError): an argument is not plain JSON, nests deeper
            than ``rules.MAX_JSON_DEPTH`` (100) or contains itself; the message
            names it (``args[1]``, ``kwargs['when']``).
        ValueError: a str in an argument (or a kwarg's name) holds a lone
            surrogate (``"\\ud800"``); the message names where.
        PayloadTooLargeError (ValueError): the text exceeds ``max_bytes`` (UTF-8).
    """
    for index, arg in enumerate(args):
        if not _plain(arg):
            check_json(arg, f"args[{index}]")
    for key, arg in kwargs.items():
        if not (type(key) is str and key.isascii()):
            rules.check_text("a name in kwargs", key)
        if not _plain(arg):
            check_json(arg, f"kwargs[{key!r}]")
    envelope = {"job": job_path, "args": list(args), "kwargs": kwargs}
    for key, value in (extra or {}).items():
        check_json(value, key)
        envelope[key] = value
    text = _encode_json(envelope)
    if len(text) > max_bytes:
        raise PayloadTooLargeError(
            f"payload is {len(text)} bytes; ECHOMQ['MAX_PAYLOAD_BYTES'] allows {max_bytes}"
        )
    return CheckedPayload(text)


def decode(text: str) -> tuple[str, list, dict, dict]:
    """Return ``(job_path, args, kwargs, extra)`` from an envelope's JSON text.

    ``extra`` holds any other top-level keys (a recurring occurrence's
    ``scheduled_for`` and ``missed``).

    Raises:
        ValueError: the text is not an envelope of this shape.
    """
    data = json.loads(text)
    if not isinstance(data, dict) or not isinstance(data.get("job"), str):
        raise ValueError("payload is not an EchoMQ envelope: no 'job' path")
    args, kwargs = data.get("args", []), data.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise ValueError("payload envelope needs 'args' as a list and 'kwargs' as an object")
    extra = {k: v for k, v in data.items() if k not in ("job", "args", "kwargs")}
    return data["job"], args, kwargs, extra
