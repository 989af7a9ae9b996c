"""The overview's charts of the last hour as SVG geometry (pure functions; no I/O).

Two charts per queue, each full width with axes, tick labels and a value
for every minute (``static/echomq_django/charts.js`` shows it on hover):

- :func:`throughput_chart`: per minute, stacked columns of jobs done,
  failed attempts that were retried, and jobs that ended dead
  (the per-minute counters ``done``, ``failed`` and ``dead``; a dead job's
  last attempt is counted in ``failed`` too, so it is drawn once, as dead);
- :func:`latency_chart`: the queue latency the metronome sampled each
  minute (``emq:{q}:latency``), a line with a gap where no sample exists.

Coordinates are in the SVG's viewBox (:data:`WIDTH` x :data:`HEIGHT`); the
SVG scales to the page's width. Times are shown in the current Django time
zone.
"""

from __future__ import annotations

import datetime as dt
import math

from django.utils import timezone

__all__ = ["WIDTH", "HEIGHT", "nice_ticks", "latency_text", "throughput_chart",
           "latency_chart"]

#: The viewBox: width and height, and the plot's margins inside it.
WIDTH, HEIGHT = 1000, 200
LEFT, RIGHT, TOP, BOTTOM = 64, 14, 12, 26
PLOT_W = WIDTH - LEFT - RIGHT
PLOT_H = HEIGHT - TOP - BOTTOM
#: A time label on the x axis every this many minutes.
X_TICK_MINUTES = 10


def nice_ticks(peak: float, most: int = 5) -> list[int]:
    """Whole tick values from 0 to at least ``peak``, at most ``most`` + 1
    of them, a step of 1, 2 or 5 times a power of ten (at least 1):
    ``nice_ticks(137) == [0, 50, 100, 150]``; ``[0, 1]`` for a peak of 0."""
    if peak <= 0:
        return [0, 1]
    raw = peak / most
    power = 10 ** max(0, math.floor(math.log10(raw)))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    count = math.ceil(peak / step - 1e-9)
    return [i * step for i in range(count + 1)]


def latency_text(ms: float) -> str:
    """A latency short and exact enough for an axis or a hover: ``850 ms``,
    ``1.5 s``, ``42 s``, ``3.5 min``, ``2 h``."""
    ms = float(ms)
    if ms < 1000:
        return f"{ms:.0f} ms"
    for unit, size in (("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if ms >= size or unit == "s":
            value = ms / size
            return f"{value:.1f} {unit}".replace(".0 ", " ") if value < 10 else f"{value:.0f} {unit}"
    raise AssertionError("unreachable")


def _count_text(value: int) -> str:
    return f"{value:,}"


def _minute_label(minute: int) -> str:
    when = dt.datetime.fromtimestamp(minute * 60, dt.timezone.utc)
    return timezone.localtime(when).strftime("%H:%M")


def _frame(first_minute: int, count: int, ticks: list[float], label) -> dict:
    """Axes, grid and labels shared by both charts."""
    step = PLOT_W / max(count, 1)
    top = ticks[-1]
    y_ticks = [{"y": round(TOP + PLOT_H - value / top * PLOT_H, 2), "label": label(value)}
               for value in ticks]
    x_ticks = [{"x": round(LEFT + (i + 0.5) * step, 2), "label": _minute_label(first_minute + i)}
               for i in range(count) if (first_minute + i) % X_TICK_MINUTES == 0]
    zone = timezone.localtime(dt.datetime.fromtimestamp(first_minute * 60, dt.timezone.utc))
    return {"width": WIDTH, "height": HEIGHT, "left": LEFT, "right": WIDTH - RIGHT, "top": TOP,
            "bottom": TOP + PLOT_H, "plot_h": PLOT_H, "tick_end": TOP + PLOT_H + 4,
            "mid_x": LEFT + PLOT_W / 2, "mid_y": TOP + PLOT_H / 2,
            "label_x": LEFT - 6, "label_y": TOP + PLOT_H + 18,
            "y_ticks": y_ticks, "x_ticks": x_ticks, "step": step,
            "zone": zone.strftime("%Z")}


def _y(value: float, top: float) -> float:
    return round(TOP + PLOT_H - value / top * PLOT_H, 2)


def throughput_chart(done: list[int], failed: list[int], died: list[int],
                     first_minute: int) -> dict:
    """Stacked columns per minute (oldest first; ``first_minute`` = server
    ms // 60000 of the first): done, failed attempts retried (failed - dead)
    and dead. Each column carries its hover text (``tip``). Returns the
    frame (viewBox, axes, ticks), ``columns`` and the hour's totals."""
    retried = [max(0, f - d) for f, d in zip(failed, died)]
    totals = [a + b + c for a, b, c in zip(done, retried, died)]
    ticks = nice_ticks(max(totals, default=0))
    frame = _frame(first_minute, len(done), ticks, _count_text)
    step, top = frame["step"], ticks[-1]
    columns = []
    for i, (d, r, x) in enumerate(zip(done, retried, died)):
        left = LEFT + i * step
        segments, base = [], 0
        for kind, value in (("done", d), ("retried", r), ("dead", x)):
            if value:
                segments.append({"kind": kind, "y": _y(base + value, top),
                                 "h": round((value / top) * PLOT_H, 2)})
            base += value
        label = _minute_label(first_minute + i)
        failures = r + x
        tip = (f"{label} {frame['zone']}: {d:,} done · {failures:,} failed "
               f"attempt{'' if failures == 1 else 's'} · {x:,} dead")
        columns.append({"x": round(left + step * 0.12, 2), "w": round(step * 0.76, 2),
                        "hit_x": round(left, 2), "hit_w": round(step, 2), "segments": segments,
                        "tip": tip, "minute": first_minute + i})
    return {**frame, "columns": columns, "total_done": sum(done),
            "total_failed": sum(failed), "total_dead": sum(died),
            "done_text": f"{sum(done):,}", "failed_text": f"{sum(failed):,}",
            "dead_text": f"{sum(died):,}",
            "label": (f"Jobs done, failed attempts and dead jobs per minute, last hour: "
                      f"{sum(done):,} done, {sum(failed):,} failed attempts, "
                      f"{sum(died):,} dead")}


def latency_chart(samples: list[int | None], first_minute: int) -> dict:
    """The latency samples per minute (ms, oldest first; None: no sample) as
    a line: ``path`` is an SVG path with a gap at each missing sample,
    ``dots`` the samples with no neighbour to draw a line to. Each minute
    carries its hover text. Returns the frame, ``path``, ``dots``,
    ``columns``, ``latest`` (the newest sample's text, "" when none) and
    ``sampled`` (how many minutes have a sample)."""
    ticks = nice_ticks(max((s for s in samples if s is not None), default=0))
    frame = _frame(first_minute, len(samples), ticks,
                   lambda v: latency_text(v) if v else "0")
    step, top = frame["step"], ticks[-1]
    path, dots, columns = [], [], []
    for i, sample in enumerate(samples):
        left = LEFT + i * step
        cx = round(left + step / 2, 2)
        label = _minute_label(first_minute + i)
        if sample is None:
            tip = f"{label} {frame['zone']}: no sample (no metronome ran)"
        else:
            y = _y(sample, top)
            starts = i == 0 or samples[i - 1] is None
            path.append(f"{'M' if starts else 'L'}{cx} {y}")
            alone = starts and (i + 1 == len(samples) or samples[i + 1] is None)
            if alone:
                dots.append({"x": cx, "y": y})
            tip = f"{label} {frame['zone']}: latency {latency_text(sample)}"
        columns.append({"hit_x": round(left, 2), "hit_w": round(step, 2), "tip": tip,
                        "minute": first_minute + i})
    latest = next((s for s in reversed(samples) if s is not None), None)
    sampled = sum(s is not None for s in samples)
    return {**frame, "path": " ".join(path), "dots": dots, "columns": columns,
            "latest": latency_text(latest) if latest is not None else "",
            "sampled": sampled,
            "label": (f"Queue latency per minute, last hour: {sampled} samples"
                      + (f", latest {latency_text(latest)}" if latest is not None else ""))}
