"""Wire consumers and the metronome into one running worker (runechomq's body).

``Worker(options).run()`` returns the process exit code. With ``processes``
> 1 the parent forks that many consumer processes (each with ``concurrency``
threads), runs the metronome itself and supervises the children: a child that
dies is replaced; SIGTERM or SIGINT is passed on to every child. Shutdown:
stop claiming, let running handlers finish within the grace period, hand the
unfinished leases back to pending, exit 0. See docs/protocol.md ("Worker").
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from dataclasses import dataclass

from django.db import connections

from .conf import get_config
from .connection import get_connection, reset_connection
from .consumer import Consumer, Retention
from .metronome import Metronome

log = logging.getLogger("echomq.worker")


@dataclass
class WorkerOptions:
    """What runechomq was asked for; see the command's ``--help`` for each."""

    queues: list[str]
    concurrency: int = 4
    processes: int = 1
    burst: bool = False
    metronome: bool = True
    consumers: bool = True
    max_jobs: int | None = None
    lease_ms: int | None = None


class Worker:
    """One runechomq process (and, with processes > 1, its children)."""

    def __init__(self, options: WorkerOptions) -> None:
        self.options = options
        self.config = get_config()
        self.stop = threading.Event()
        self.signalled = 0

    # -- signals -----------------------------------------------------------

    def _on_signal(self, signum, frame) -> None:
        self.signalled += 1
        log.info("received %s: stopping", signal.Signals(signum).name)
        self.stop.set()

    def _install_signals(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    # -- parts -------------------------------------------------------------

    def _pump(self):
        from .repeat import Repeat

        repeat = Repeat(get_connection())
        return repeat.pump

    def _sync_schedules(self) -> None:
        from . import registry
        from .repeat import sync

        declared = [fn.schedule for fn in registry.all_jobs() if fn.schedule]
        for name, spec in self.config.schedules.items():
            declared.append(dict(spec, name=name))
        if declared or self.config.prune_schedules:
            report = sync(get_connection(), declared, prune=self.config.prune_schedules,
                          queues=self.options.queues)
            log.info("recurring schedules synced: %s", report)

    def _metronome(self) -> Metronome:
        return Metronome(get_connection(), self.options.queues,
                         batch=self.config.promote_batch, pump=self._pump(),
                         stop_event=threading.Event())

    def _consumer(self) -> Consumer:
        config = self.config
        return Consumer(
            get_connection(), self.options.queues,
            concurrency=self.options.concurrency,
            lease_ms=self.options.lease_ms or config.lease_ms,
            retention=Retention(config.result_ttl_ms, config.dead_ttl_ms, config.dead_max),
            burst=self.options.burst, max_jobs=self.options.max_jobs, stop=self.stop)

    # -- run ---------------------------------------------------------------

    def run(self) -> int:
        """Run until stopped (or, in burst mode, until nothing is ready). Returns 0."""
        self._install_signals()
        opts = self.options
        metronome = None
        if opts.metronome:
            self._sync_schedules()
            metronome = self._metronome()
            if opts.burst:
                for queue in opts.queues:
                    metronome.beat(queue)
            else:
                metronome.start()
        log.info("runechomq: queues %s, %s", ", ".join(opts.queues), self._describe())
        try:
            if not opts.consumers:
                self.stop.wait() if not opts.burst else None
            elif opts.processes > 1:
                self._supervise()
            else:
                self._run_consumer()
        finally:
            if metronome is not None:
                metronome.stop()
                metronome.join(2.0)
        return 0

    def _describe(self) -> str:
        opts = self.options
        parts = []
        if opts.consumers:
            parts.append(f"{opts.processes} process(es) x {opts.concurrency} thread(s)")
        parts.append("metronome on" if opts.metronome else "metronome off")
        if opts.burst:
            parts.append("burst")
        return ", ".join(parts)

    def _run_consumer(self) -> None:
        consumer = self._consumer()
        consumer.start()
        # Wait in short steps so signal handlers run promptly in the main thread.
        while consumer.alive() and not self.stop.is_set():
            time.sleep(0.05)
        released = consumer.shutdown(self.config.shutdown_grace_ms / 1000)
        if released:
            log.warning("handed %d unfinished job(s) back to pending", released)

    # -- processes -----------------------------------------------------------

    def _fork_child(self) -> int:
        # Never let a child inherit the parent's database or Redis sockets.
        connections.close_all()
        pid = os.fork()
        if pid:
            return pid
        code = 0
        try:
            reset_connection()
            self.stop = threading.Event()
            self._install_signals()
            self._run_consumer()
        except BaseException:  # noqa: BLE001 - a child must never return into the parent's code
            log.exception("consumer process failed")
            code = 1
        finally:
            logging.shutdown()
            os._exit(code)
        return 0  # unreachable

    def _supervise(self) -> None:
        children = {self._fork_child(): index for index in range(self.options.processes)}
        while children:
            if self.stop.is_set():
                break
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                time.sleep(0.1)
                continue
            index = children.pop(pid, None)
            if index is None:
                continue
            code = os.waitstatus_to_exitcode(status)
            if self.options.burst or (self.options.max_jobs is not None and code == 0):
                continue  # A child that drained its share is done.
            log.warning("consumer process %d exited with %d; starting a new one", pid, code)
            children[self._fork_child()] = index
        for pid in children:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + self.config.shutdown_grace_ms / 1000 + 5
        while children and time.monotonic() < deadline:
            pid, _ = os.waitpid(-1, os.WNOHANG)
            if pid:
                children.pop(pid, None)
            else:
                time.sleep(0.05)
        for pid in children:
            log.error("consumer process %d did not stop in time; killing it", pid)
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
