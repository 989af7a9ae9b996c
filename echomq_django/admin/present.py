"""How the admin shows times, durations and charts (pure functions; no I/O).

Times are Unix ms on the server clock, shown in the current Django time zone
(or a schedule's own zone) with the zone's name; charts are SVG bar data the
templates draw.
"""

from __future__ import annotations

import datetime as dt
import json
import re

from django.utils import timezone

from . import reads

__all__ = ["fmt_ms", "span", "rel", "arguments", "limits", "lane_label",
           "schedule_histogram", "UTC"]

UTC = dt.timezone.utc


def _local(ms: int, zone=None) -> dt.datetime:
    when = dt.datetime.fromtimestamp(ms / 1000, UTC)
    return when.astimezone(zone) if zone is not None else timezone.localtime(when)


def fmt_ms(ms: int | None, zone=None) -> str:
    """A Unix ms instant as ``YYYY-MM-DD HH:MM:SS ZONE`` in ``zone`` (default:
    the current Django time zone), ZONE being the zone's abbreviation at that
    instant (``CET``, ``CEST``, ``UTC``); "" for None."""
    if ms is None:
        return ""
    return _local(ms, zone).strftime("%Y-%m-%d %H:%M:%S %Z")


def span(ms: int) -> str:
    """A duration in ms, short: ``850 ms``, ``42 s``, ``3 min 5 s``, ``2 h 4 min``, ``3 d 1 h``."""
    ms = abs(int(ms))
    if ms < 1000:
        return f"{ms} ms"
    s = ms // 1000
    if s < 60:
        return f"{s} s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m} min {s} s" if s else f"{m} min"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{h} h {m} min" if m else f"{h} h"
    d, h = divmod(h, 24)
    return f"{d} d {h} h" if h else f"{d} d"


_UNIT_MS = {"ms": 1, "s": 1000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def exact_span(ms: int) -> str:
    """:func:`span` when it says exactly ``ms`` (``1 min 30 s``), else the
    ms themselves (``1500 ms``, where span would say ``1 s``)."""
    text = span(ms)
    parts = text.split()
    if sum(int(n) * _UNIT_MS[u] for n, u in zip(parts[::2], parts[1::2])) == abs(int(ms)):
        return text
    return f"{abs(int(ms))} ms"


def rel(ms: int | None, now_ms: int) -> str:
    """``in 3 min`` or ``5 s ago`` relative to the server's now; "" for None."""
    if ms is None:
        return ""
    delta = ms - now_ms
    return f"in {span(delta)}" if delta > 0 else f"{span(delta)} ago"


def limits(values: dict) -> list[str]:
    """A queue's limits (as ``Queues.limits`` returns them) as short phrases,
    ``["concurrency 10", "lane concurrency 1", "rate 5 per 1 s", "lane rate
    1 per 1 min"]``; empty when it has none."""
    out = []
    for key, label in (("concurrency", "concurrency"), ("lane_concurrency", "lane concurrency")):
        if values.get(key) is not None:
            out.append(f"{label} {values[key]}")
    for key, label in (("rate", "rate"), ("lane_rate", "lane rate")):
        if values.get(key) is not None:
            count, per_ms = values[key]
            out.append(f"{label} {count} per {exact_span(per_ms)}")
    return out


def lane_label(name: str | None) -> str:
    """A lane's name as the pages show it: the group, or "(ungrouped)"."""
    return name or "(ungrouped)"


_ARGS = re.compile(r'"args"\s*:\s*\[?')


def _json(value) -> str:
    return json.dumps(value, ensure_ascii=False)


def arguments(payload: str | None) -> str:
    """A job's arguments from its payload's ``args`` and ``kwargs``, listed as
    a call would: ``7, "x", to="chat-9"``; "" when the payload has none.

    A list row's payload is cut short (reads.CUT_BYTES): when it does not
    parse, the text after ``"args":`` is shown as it stands, ending in "…".
    """
    if not payload:
        return ""
    try:
        data = json.loads(payload)
    except ValueError:
        found = _ARGS.search(payload)
        return payload[found.end():] + "…" if found else ""
    if not isinstance(data, dict):
        return ""
    args, kwargs = data.get("args", []), data.get("kwargs", {})
    parts = [_json(a) for a in args] if isinstance(args, list) else [_json(args)]
    if isinstance(kwargs, dict):
        parts += [f"{key}={_json(value)}" for key, value in kwargs.items()]
    return ", ".join(parts)


def _bars(values: list[int], width: float, height: float) -> tuple[list[dict], int]:
    peak = max(values, default=0)
    step = width / max(len(values), 1)
    bars = []
    for i, value in enumerate(values):
        h = 0 if not peak else max(1.0, value / peak * height) if value else 0
        bars.append({"x": round(i * step, 2), "y": round(height - h, 2), "w": round(step * 0.8, 2),
                     "h": round(h, 2), "value": value})
    return bars, peak


def schedule_histogram(q: reads.QueueSummary) -> dict:
    """The next hour's schedule per bucket as SVG bar data."""
    bars, peak = _bars(q.upcoming, 240, 44)
    minutes = reads.BUCKET_MS // 60_000
    for i, bar in enumerate(bars):
        bar["title"] = f"in {i * minutes}-{(i + 1) * minutes} min: {bar['value']} scheduled"
    return {"bars": bars, "peak": peak, "total": sum(q.upcoming), "bucket_min": minutes}
