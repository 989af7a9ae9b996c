"""Django signals for a job's life and a worker's, sent from the process where
the thing happened (docs/observability.md, "Signals").

Usage::

    from django.dispatch import receiver
    from echomq_django import signals

    @receiver(signals.job_finished)
    def on_finished(sender, queue, job_id, path, outcome, attempt, duration_ms, **kwargs):
        ...

Every signal is sent with ``send_robust`` through :func:`send`: a receiver
that raises is logged (logger ``echomq.signals``) and never breaks the
enqueue or the worker. None is sent from a Lua script or costs a Redis call:
the arguments are what the sending process already knows. A signal nobody
listens to costs one attribute check (:func:`listened`).

- :data:`job_enqueued` (sender ``Jobs``): a job reached the bus (enqueued or
  scheduled), in the process that admitted it: the enqueuing one, at once or
  when its transaction commits; for an outbox job, the enqueuing process
  after the commit or the runechomq relay. Arguments: ``queue``, ``job_id``,
  ``path`` (the dotted path of the @job or Task; "?" when the payload is not
  an envelope), ``outcome`` ("enqueued" or "scheduled"), ``group`` (str or
  None), ``priority`` (int), ``delay_ms`` and ``run_at_ms`` (int or None).
- :data:`job_started` (sender ``Runner``): a handler is about to run, in
  the runechomq consumer process. Arguments: ``queue``, ``job_id``, ``path``,
  ``attempt`` (1 for the first run), ``group`` (str or None), ``worker`` (the
  consumer's name).
- :data:`job_finished` (sender ``Runner``): a claimed job's outcome was
  recorded (or could not be). Arguments: ``queue``, ``job_id``, ``path``,
  ``attempt``, ``outcome`` (done, retry, snooze, dead, cancelled; stale when
  the lease was lost, unrecorded when the server could not be reached),
  ``duration_ms`` (float, the handler's wall time as this process measured
  it), ``delay_ms`` (retry, snooze: int; else None), ``reason`` (dead: str),
  ``error`` (the exception's last traceback line, "pkg.Exc: message", or
  None), ``error_class`` (its dotted class path or None), ``traceback`` (str or
  None), ``result`` (done: the return value; else None).
- :data:`worker_started` / :data:`worker_stopping` (sender ``Consumer``): a
  consumer's threads started / it begins to shut down. Arguments: ``worker``
  (its name, ``host:pid``), ``queues`` (list of str), ``concurrency`` (int);
  stopping adds ``processed`` (jobs it ran to an outcome).
"""

from __future__ import annotations

import logging

from django.dispatch import Signal

__all__ = ["job_enqueued", "job_started", "job_finished", "worker_started",
           "worker_stopping", "send", "listened"]

log = logging.getLogger("echomq.signals")

job_enqueued = Signal()
job_started = Signal()
job_finished = Signal()
worker_started = Signal()
worker_stopping = Signal()


def listened(signal: Signal) -> bool:
    """Whether any receiver is connected to ``signal`` (weak receivers that
    died still count until Django clears them: a false True only costs a
    send)."""
    return bool(signal.receivers)


def send(signal: Signal, sender: object, **kwargs) -> None:
    """Send ``signal`` to its receivers with ``send_robust``; each error a
    receiver raised is logged with its traceback and goes no further."""
    for receiver, answer in signal.send_robust(sender, **kwargs):
        if isinstance(answer, Exception):
            log.error("a receiver of echomq %s (%r) raised; ignored", _name(signal), receiver,
                      exc_info=(type(answer), answer, answer.__traceback__))


def _name(signal: Signal) -> str:
    for name in __all__:
        if globals().get(name) is signal:
            return name
    return "signal"
