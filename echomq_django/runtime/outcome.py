"""One claimed job: run its handler and record the outcome through the protocol.

:class:`Runner` maps what the handler did to one atomic script
(docs/protocol.md, "Consumer"):

- it returns (or returns a :class:`~echomq_django.api.outcomes.Snooze`):
  ``ack`` with the JSON return value kept as the result (or ``snooze``);
- it raises and attempts < max_attempts: ``retry`` after the
  :class:`~echomq_django.api.outcomes.Retry`'s delay or
  ``Backoff.delay_ms(policy, attempts)``;
- it raises on the last attempt: ``dead`` with reason "failed" and the traceback;
- it raises ``Snooze`` or ``Discard``: ``snooze``, or ``dead`` at once;
- the payload names a job this process did not register, or is not an
  envelope: ``dead`` at once (never an import of an arbitrary module).

A handler can never take its thread down: anything it raises, ``SystemExit``
included, is that job's failure. Recording an outcome rides out a dropped
connection or a full server (:func:`~.resilience.persist`, until the lease
runs out); a repeat whose first reply was lost answers the recorded outcome.
An error of ours never makes a job dead: the job stays leased and the reaper
returns it. Django database connections are reset after each handler, and
before it too unless the thread's previous job ended within a second.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from dataclasses import dataclass

import redis
from django.db import close_old_connections
from django.db.backends.signals import connection_created

from .. import rules
from ..api import payload, registry
from ..api.backoff import Backoff
from ..api.context import JobContext
from ..api.outcomes import Discard, Retry, Snooze
from ..connection.resilience import Outage, persist
from ..exceptions import StaleTokenError, UnknownJobError, class_path
from ..protocol.jobs import Jobs
from ..protocol.records import Claim, Finish
from . import observe
from .finisher import Finisher
from .slots import Slots

__all__ = ["Retention", "Runner", "after_failure", "decide_failure"]

log = logging.getLogger("echomq.consumer")


def after_failure(attempts: int, max_attempts: int, policy: tuple) -> tuple[str, int]:
    """What a failed attempt leads to: ``("retry", delay_ms)`` after the
    backoff while attempts remain, else ``("dead", 0)`` (docs/protocol.md,
    "Consumer"). ``attempts`` counts this one."""
    if attempts >= max_attempts:
        return "dead", 0
    return "retry", Backoff.delay_ms(policy, attempts)


def decide_failure(fn, err: BaseException, claim: Claim, max_attempts: int,
                   policy: tuple) -> tuple[str, int]:
    """:func:`after_failure` for ``claim``'s attempt, unless the job's
    registered function has a retry rule of its own, ``fn.after_failure(err,
    claim)`` (a django.tasks Task's), which answers the same shape."""
    decide = getattr(fn, "after_failure", None)
    if decide is not None:
        try:
            return decide(err, claim)
        except Exception:  # noqa: BLE001 - never leave the attempt unrecorded for it
            log.exception("job %s: its own retry rule failed; the default rule decides",
                          claim.job_id)
    return after_failure(claim.attempts, max_attempts, policy)


@dataclass(frozen=True)
class Retention:
    """How long finished rows are kept (ms) and how many dead letters."""

    result_ttl_ms: int
    dead_ttl_ms: int
    dead_max: int


class Runner:
    """Runs claimed jobs and records their outcomes.

    Args:
        jobs: the protocol surface.
        lease_ms: the lease the claim took; a job's own ``lease_ms`` extends it.
        retention: see :class:`Retention`.
        slots: where the running job is described for the lease keeper.
    """

    def __init__(self, jobs: Jobs, *, lease_ms: int, retention: Retention, slots: Slots,
                 outage: Outage | None = None, finisher: Finisher | None = None) -> None:
        self.jobs = jobs
        self.lease_ms = lease_ms
        self.retention = retention
        self.slots = slots
        self.outage = outage or Outage()
        self.finisher = finisher or Finisher(
            jobs, consumer="", lease_ms=lease_ms, outage=self.outage,
            keep=(retention.result_ttl_ms, retention.dead_ttl_ms, retention.dead_max))

    def run_claim(self, claim: Claim) -> str:
        """Run one claimed job and record its outcome; returns the outcome word
        (done, retry, snooze, dead, cancelled, stale, timeout, or unrecorded
        when the server could not be reached before the lease ran out)."""
        started = time.monotonic()
        path = "?"
        try:
            path, args, kwargs, extra = payload.decode(claim.payload)
        except ValueError as err:
            return self.finish(claim, path, started, "dead", reason="bad payload", error=str(err))
        fn = registry.lookup(path)
        if fn is None and "task" in extra:  # a django.tasks Task, found by its path
            fn = registry.resolve(path)
        if fn is None:
            where = ("a Task at" if "task" in extra else "@job registered at")
            return self.finish(claim, path, started, "dead", reason="unknown job",
                               error=_exception_text(UnknownJobError(
                                   f"no {where} {path!r} in this worker (runechomq finds "
                                   "jobs and tasks in the modules of installed apps)")),
                               error_class=class_path(UnknownJobError()))
        max_attempts, policy, _ = fn.effective()
        lease_ms = fn.lease_ms or self.lease_ms
        # The claim took this worker's lease; a job that names its own gets it.
        if lease_ms != self.lease_ms:
            try:
                persist(lambda: self.jobs.extend(claim.queue, claim.job_id, claim.token, lease_ms),
                        deadline=started + self.lease_ms / 1000, outage=self.outage)
            except StaleTokenError:
                return self.finish(claim, path, started, "stale")
            except redis.RedisError as err:
                # Not run, not failed: the lease runs out and the reaper returns it.
                log.warning("job %s: its lease could not be extended (%s); left for the "
                            "reaper", claim.job_id, err)
                return "unrecorded"
        slot = self.slots.current()
        if slot is not None:
            slot.lease_ms, slot.timeout_ms = lease_ms, fn.timeout_ms
            slot.max_attempts, slot.policy, slot.path = max_attempts, policy, path
        if fn.context:  # built only for a handler that asked for it, under the keyword
            # it names (a Task takes it apart from its own arguments)
            kwargs = dict(kwargs, **{getattr(fn, "context_name", "context"): JobContext(
                self.jobs, claim, lease_ms=lease_ms, snoozes=claim.snoozes,
                scheduled_for_ms=extra.get("scheduled_for"), missed=extra.get("missed", 0),
                timeout_ms=fn.timeout_ms, extra=extra, outage=self.outage,
                cancel_flag=None if slot is None else lambda: slot.cancel_requested)})
        _fresh_connections()
        observe.started(Runner, claim, path, self.finisher.consumer)
        try:
            result = fn.fn(*args, **kwargs)
        except Snooze as snooze:
            if slot is not None and slot.timed_out:
                return self._timed_out(claim, path, started)
            return self.finish(claim, path, started, "snooze", delay_ms=snooze.delay_ms)
        except Discard as discard:
            return self.finish(claim, path, started, "dead", reason=discard.reason,
                               error=traceback.format_exc(), error_class=class_path(discard))
        except BaseException as err:  # noqa: BLE001 - whatever a handler raises (SystemExit
            # too) is that job's failure: handler code never takes its thread down.
            if slot is not None and slot.timed_out:
                return self._timed_out(claim, path, started)
            error = traceback.format_exc()
            outcome, delay_ms = decide_failure(fn, err, claim, max_attempts, policy)
            if outcome == "retry" and isinstance(err, Retry) and err.delay_ms is not None:
                delay_ms = err.delay_ms
            return self.finish(claim, path, started, outcome,
                               reason="failed" if outcome == "dead" else "", delay_ms=delay_ms,
                               error=error, error_class=class_path(err))
        finally:
            _after_handler()
        if slot is not None and slot.timed_out:
            return self._timed_out(claim, path, started)
        if isinstance(result, Snooze):
            return self.finish(claim, path, started, "snooze", delay_ms=result.delay_ms)
        return self.finish(claim, path, started, "done", result=result)

    def _timed_out(self, claim: Claim, path: str, started: float) -> str:
        log.warning("job %s %s attempt %d returned after its time limit; its outcome was "
                    "already recorded as a timeout [%.1f ms]", claim.job_id, path,
                    claim.attempts, (time.monotonic() - started) * 1000)
        return "timeout"

    def finish(self, claim: Claim, path: str, started: float, outcome: str, *,
               reason: str = "", error: str = "", delay_ms: int = 0, result=None,
               error_class: str = "") -> str:
        """Record ``outcome`` (done, retry, snooze, dead; any other word only
        logs) for ``claim`` and log it; returns the outcome as recorded
        (cancelled when a cancel was requested, stale when the lease was lost).

        ``reason`` and ``error`` come from the handler (a Discard's reason, a
        traceback): a lone surrogate in them is stored as its escape
        (:func:`echomq_django.rules.storable_text`), never refused.
        ``error_class`` is the dotted path of the exception's class, kept
        with the attempt's error. A job whose registered function has an
        ``on_finished(claim, outcome, result=, error=, error_class=)`` hook
        (a django.tasks Task) hears the recorded outcome; then the
        ``job_finished`` signal and the process's metrics
        (:mod:`~echomq_django.runtime.observe`)."""
        duration_s = time.monotonic() - started
        reason, error = rules.storable_text(reason), rules.storable_text(_capped(error))
        finish = self._finish_for(claim, outcome, reason, error, delay_ms, result, error_class)
        try:
            state = outcome if finish is None else self.finisher.record(
                claim, finish, lease_s=self._lease_s(), slot=self.slots.current())
            if state == "cancelled":
                outcome = "cancelled"
            failure = None
        except StaleTokenError:
            outcome, failure = "stale", None
        except redis.RedisError as err:
            outcome, failure = "unrecorded", (outcome, err)
        hook = getattr(registry.lookup(path), "on_finished", None)
        if hook is not None:
            hook(claim, outcome, result=result, error=error, error_class=error_class)
        observe.finished(Runner, claim, path, outcome, duration_s, reason=reason, error=error,
                         error_class=error_class, delay_ms=delay_ms, result=result)
        level = _LOG_LEVELS.get(outcome, logging.WARNING)
        if log.isEnabledFor(level):  # no formatting for a line nobody reads
            log.log(level, "job %s %s attempt %d -> %s%s [%.1f ms]", claim.job_id, path,
                    claim.attempts, outcome,
                    _detail(outcome, reason, error, delay_ms, failure),
                    (time.monotonic() - started) * 1000)
        return outcome

    def _lease_s(self) -> float:
        slot = self.slots.current()
        return (slot.lease_ms if slot is not None else self.lease_ms) / 1000

    def _finish_for(self, claim: Claim, outcome: str, reason: str, error: str, delay_ms: int,
                    result, error_class: str) -> Finish | None:
        """The :class:`Finish` that records ``outcome``, or None for a word
        that is only logged."""
        if outcome == "done":
            try:
                text = "" if result is None else rules.json_text("result", result)
            except (TypeError, ValueError) as err:
                log.warning("job %s returned a value that is not JSON (%s); it is not kept",
                            claim.job_id, err)
                text = ""
            # Encoded once here; finish sends the text as it is.
            return Finish("ack", claim.job_id, claim.token, result_text=text)
        if outcome == "retry":
            return Finish("retry", claim.job_id, claim.token, delay_ms=delay_ms, error=error,
                          error_class=error_class)
        if outcome == "snooze":
            return Finish("snooze", claim.job_id, claim.token, delay_ms=delay_ms)
        if outcome == "dead":
            return Finish("dead", claim.job_id, claim.token, reason=reason, error=error,
                          error_class=error_class)
        return None


#: A handler thread that ran a job this recently (s) skips the reset of
#: Django's database connections before the next: the reset after that job
#: has just run (Django resets around each request the same way).
_RESET_GAP_S = 1.0
_reset = threading.local()


def _connected(sender, connection, **kwargs) -> None:
    # Django opens a connection in the thread that uses it (its connections
    # are per thread), and says so with connection_created in that thread.
    _reset.connected = True


connection_created.connect(_connected, dispatch_uid="echomq_django.runtime.outcome")


def _fresh_connections() -> None:
    """Before a handler: drop unusable or expired database connections,
    unless this thread did so right after its previous job. A thread that
    never opened one has none to drop: nothing is asked of Django."""
    if (getattr(_reset, "connected", False)
            and time.monotonic() - getattr(_reset, "at", -_RESET_GAP_S) >= _RESET_GAP_S):
        close_old_connections()


def _after_handler() -> None:
    if getattr(_reset, "connected", False):
        close_old_connections()
        _reset.at = time.monotonic()


#: A job's outcome line is logged at this level: a job done (or snoozed) is
#: DEBUG (``-v 2``), so the default verbosity formats nothing per job that
#: went well; a retry or a cancel is INFO; dead, stale, unrecorded WARNING.
_LOG_LEVELS = {"done": logging.DEBUG, "snooze": logging.DEBUG, "retry": logging.INFO,
               "cancelled": logging.INFO}


def _detail(outcome: str, reason: str, error: str, delay_ms: int, failure) -> str:
    if outcome == "retry":
        return f" in {delay_ms} ms: {_last_line(error)}"
    if outcome == "snooze":
        return f" for {delay_ms} ms"
    if outcome == "dead":
        return f" ({reason}): {_last_line(error)}"
    if outcome == "cancelled":
        return " (a cancel was requested while it ran)"
    if outcome == "stale":
        return " (the lease was lost: another worker owns the job now)"
    if outcome == "unrecorded" and failure is not None:
        wanted, err = failure
        return (f" ({wanted} could not be recorded: {err}; the lease runs out and the reaper "
                "returns the job)")
    return ""


#: Most characters of a failure's text kept (the row, the log line, the
#: archive): a handler's 20 MB exception message must not make a 20 MB row.
MAX_ERROR_CHARS = 64_000


def _capped(error: str) -> str:
    """``error`` kept to its last :data:`MAX_ERROR_CHARS` characters (the end
    of a traceback says what failed), with a note of what was cut."""
    if len(error) <= MAX_ERROR_CHARS:
        return error
    return (f"[{len(error) - MAX_ERROR_CHARS} characters cut]\n"
            + error[-MAX_ERROR_CHARS:])


def _exception_text(err: BaseException) -> str:
    """``"pkg.ExcName: message\n"``: the last line a traceback of ``err``
    would end in, for a failure recorded without one."""
    return "".join(traceback.format_exception_only(err))


def _last_line(error: str) -> str:
    lines = [line for line in error.strip().splitlines() if line.strip()]
    line = lines[-1] if lines else ""
    return line if len(line) <= 1000 else line[:1000] + "..."
