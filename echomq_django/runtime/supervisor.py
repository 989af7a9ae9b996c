"""The supervisor: runechomq's body, wiring consumers and the metronome into processes.

``Supervisor(options).run()`` returns the process exit code. With ``processes``
> 1 the parent forks that many consumer processes (each with ``concurrency``
threads) and one metronome process, and supervises them: a child that dies is
replaced, at once, or after a delay that grows while it keeps dying soon after
its start (:mod:`.restarts`); SIGTERM or SIGINT is passed on to every child.
Shutdown: stop claiming, let running handlers finish within the grace period,
hand the unfinished leases back to pending, exit 0. See docs/protocol.md
("Worker").
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from dataclasses import dataclass

import redis
from django.db import connections

from ..conf import get_config
from ..connection import describe, get_connection, reset_connection
from ..connection.resilience import Outage, persist
from ..connection.topology import is_cluster
from ..connection.urls import redacted
from ..exceptions import ConfigurationError
from ..protocol import scripts
from ..rules import check_int
from .consumer import Consumer, Retention
from .metronome import Metronome
from .restarts import RESTART_STABLE_S, ChildSlot
from .services import floor_services, stop_all

__all__ = ["Options", "Supervisor", "EXIT_CRASHED", "MAX_PROCESSES"]

#: Exit code of a process whose consumer thread died of an error of ours (EX_SOFTWARE).
EXIT_CRASHED = 70
#: The most consumer processes one supervisor forks (more on one host is a
#: mistake: run more hosts, or more threads per process).
MAX_PROCESSES = 1000
#: How long the boot-time schedule sync rides out a server that drops connections (s).
BOOT_PERSIST_S = 60.0
#: How long the first PING rides out dropped connections (s): a refused or
#: unreachable server is still one clear error within about this long.
PING_PERSIST_S = 1.0
log = logging.getLogger("echomq.worker")


@dataclass
class Options:
    """What runechomq was asked for; see the command's ``--help`` for each."""

    queues: list[str]
    concurrency: int = 4
    processes: int = 1
    burst: bool = False
    metronome: bool = True
    consumers: bool = True
    max_jobs: int | None = None
    lease_ms: int | None = None
    shutdown_grace_ms: int | None = None
    metrics_port: int | None = None     # consumer k of --processes serves port + k - 1
    metrics_addr: str = "0.0.0.0"


class Supervisor:
    """One runechomq process (and, with processes > 1, its children)."""

    def __init__(self, options: Options) -> None:
        """Raises TypeError or ValueError for ``processes`` outside 1..MAX_PROCESSES
        (the consumer checks ``concurrency`` itself)."""
        check_int("processes", options.processes, 1, MAX_PROCESSES)
        self.options = options
        self.config = get_config()
        self.stop = threading.Event()
        self.signalled = 0
        self.grace_s = (options.shutdown_grace_ms if options.shutdown_grace_ms is not None
                        else self.config.shutdown_grace_ms) / 1000
        self.exit_code = 0
        self._outage: tuple[int, Outage] | None = None
        self._slot_index = 0   # a forked consumer's slot - 1 (its metrics port offset)

    def outage(self) -> Outage:
        """This process's view of the server, shared by its threads (one log
        line per outage); a forked child gets its own."""
        if self._outage is None or self._outage[0] != os.getpid():
            client = get_connection()
            where = f"the EchoMQ server at {describe(client)}"
            hold_s = Outage.HOLD_S if is_cluster(client) else 0.0
            self._outage = (os.getpid(), Outage(where, hold_s=hold_s))
        return self._outage[1]

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
        from ..repeat.pump import Pump

        return Pump(get_connection()).pump

    def _declared(self) -> list[dict]:
        from ..api import registry
        from ..repeat.sync import declared_schedules

        return declared_schedules(registry.schedules(), self.config.schedules)

    def _has_declarations(self) -> bool:
        return (bool(self._declared()) or self.config.prune_schedules
                or bool(self.config.queue_limits) or self.config.archive is not None)

    def _sync_declared(self) -> None:
        """Write what settings and code declare to the server: the queues'
        limits (``QUEUE_LIMITS``), the archive's stream cap (``ARCHIVE``) and
        the recurring schedules (docs/repeat.md, "sync"); at boot, and from
        the metronome when a queue's sync marker is gone (data lost)."""
        from ..protocol.queues import Queues
        from ..repeat.sync import sync
        from .archiver import declare_archive

        queues = Queues(get_connection())
        declare_archive(queues, self.options.queues, self.config.archive, self.outage())
        for queue, limits in self.config.queue_limits.items():
            changed = persist(lambda q=queue, lim=limits: queues.set_limits(q, **lim),
                              deadline=time.monotonic() + BOOT_PERSIST_S, outage=self.outage())
            log.info("queue %s limits%s: %s", queue, "" if changed else " (unchanged)",
                     ", ".join(f"{k} {v}" for k, v in limits.items() if v) or "none")
        for queue in self.options.queues:
            if queue in self.config.queue_limits:
                continue
            kept = {k: v for k, v in persist(lambda q=queue: queues.limits(q),
                                             deadline=time.monotonic() + BOOT_PERSIST_S,
                                             outage=self.outage()).items() if v}
            if kept:
                log.info("queue %s keeps the limits the server holds (not in QUEUE_LIMITS; "
                         "{} there clears them): %s", queue,
                         ", ".join(f"{k} {v}" for k, v in kept.items()))
        declared = self._declared()
        if self._has_declarations():
            # Idempotent, so repeated through a dropped connection.
            report = persist(lambda: sync(get_connection(), declared,
                                          prune=self.config.prune_schedules,
                                          queues=self.options.queues),
                             deadline=time.monotonic() + BOOT_PERSIST_S, outage=self.outage())
            log.info("recurring schedules synced: %s",
                     ", ".join(f"{k} {v}" for k, v in report.items() if v) or "nothing to do")

    def _retention(self) -> Retention:
        """The retention settings the consumer's deaths and reap's share."""
        config = self.config
        return Retention(config.result_ttl_ms, config.dead_ttl_ms, config.dead_max)

    def _metronome(self) -> Metronome:
        return Metronome(get_connection(), self.options.queues,
                         batch=self.config.promote_batch, pump=self._pump(),
                         max_stalls=self.config.max_stalls, retention=self._retention(),
                         stop_event=threading.Event(),
                         outage=self.outage(),
                         resync=self._sync_declared if self._has_declarations() else None)

    def _consumer(self) -> Consumer:
        config = self.config
        return Consumer(
            get_connection(), self.options.queues,
            concurrency=self.options.concurrency,
            lease_ms=self.options.lease_ms or config.lease_ms,
            retention=self._retention(),
            burst=self.options.burst, max_jobs=self.options.max_jobs, stop=self.stop,
            outage=self.outage())

    # -- run ---------------------------------------------------------------

    def check_server(self) -> None:
        """Reach the server once (PING) before anything starts.

        Raises ConfigurationError naming the URL (never its password) when it
        cannot be reached within PING_PERSIST_S or refuses the connection (a
        wrong password, a db index it lacks).
        """
        from redis.exceptions import RedisClusterException

        try:
            client = get_connection()
        except (redis.RedisError, RedisClusterException, TypeError, ValueError) as err:
            # Building a cluster client reads the slot map at once: a node that
            # refuses, a wrong password, a bad option fail here.
            url = redacted(get_config().url or f"CACHE {get_config().cache!r}")
            raise ConfigurationError(f"cannot use the EchoMQ server at {url}: {err}") from None
        try:
            # A connection dropped under the PING (a CLIENT KILL, a proxy's
            # reset) is tried again for up to PING_PERSIST_S; a refused or
            # unreachable server still fails within it, and a refusal that
            # does not pass (a wrong password, a missing db) at once.
            persist(client.ping, deadline=time.monotonic() + PING_PERSIST_S,
                    outage=self.outage())
        except (redis.RedisError, RedisClusterException) as err:
            raise ConfigurationError(
                f"cannot use the EchoMQ server at {describe(client)}: {err}") from None

    def run(self) -> int:
        """Run until stopped (or, in burst mode, until nothing is ready). Returns
        the exit code: 0, or 70 when a consumer thread died of an error of ours.

        Raises ConfigurationError when the server cannot be reached at start.
        """
        self.check_server()
        self._install_signals()
        opts = self.options
        if opts.metronome:
            self._sync_declared()
        log.info("runechomq: queues %s, %s", ", ".join(opts.queues), self._describe())
        if opts.consumers and (opts.processes > 1 or self._archive_apart()):
            self._supervise()
        else:
            self._run_here(metronome=opts.metronome, consumers=opts.consumers)
        return self.exit_code

    def _archive_apart(self) -> bool:
        """With ARCHIVE on, the metronome (with the relay and the archiver)
        runs in a process of its own even with one consumer process: the
        archiver's Python work never takes the consumers' GIL."""
        opts = self.options
        return self.config.archive is not None and opts.metronome and not opts.burst

    def _describe(self) -> str:
        opts = self.options
        parts = []
        if opts.consumers:
            parts.append(f"{opts.processes} process(es) x {opts.concurrency} thread(s)")
        parts.append("metronome on" if opts.metronome else "metronome off")
        if opts.burst:
            parts.append("burst")
        return ", ".join(parts)

    def _run_here(self, *, metronome: bool, consumers: bool, replaceable: bool = False) -> None:
        """Run the metronome and/or consumers as threads of this process."""
        if not self.options.burst:
            # Off the hot path: a script's first call would build its text.
            threading.Thread(target=scripts.warm_sources, name="echomq-warm-scripts",
                             daemon=True).start()
        beat, services = None, []
        if metronome:
            beat = self._metronome()
            if self.options.burst:
                for queue in self.options.queues:
                    beat.beat(queue)
            else:
                beat.start()
                services = floor_services(get_connection(), list(self.options.queues),
                                          self.config, self.outage())
                for service in services:
                    service.start()
        try:
            if consumers:
                self._run_consumer(replaceable=replaceable)
            elif not self.options.burst:
                while not self.stop.is_set():
                    self.stop.wait(0.1)
        finally:
            stop_all(services)
            if beat is not None:
                beat.stop()
                beat.join(2.0)

    def _run_consumer(self, *, replaceable: bool = False) -> None:
        if self.options.metrics_port is not None:  # docs/observability.md, "Worker metrics"
            from ..integrations.metrics.process import serve

            serve(self.options.metrics_port + self._slot_index, self.options.metrics_addr)
        consumer = self._consumer()
        consumer.exit_on_timeout = replaceable
        consumer.start()
        # Wait in short steps so signal handlers run promptly in the main thread.
        while consumer.alive() and not self.stop.is_set():
            time.sleep(0.05)
        released = consumer.shutdown(self.grace_s)
        if released:
            log.warning("handed %d unfinished job(s) back to pending", released)
        if consumer.crashed:
            self.exit_code = EXIT_CRASHED

    # -- processes -----------------------------------------------------------
    # The supervising parent never starts a thread and drops its sockets before
    # every fork: forking a process that runs threads can copy a lock some
    # thread holds, and the child would wait on it forever. So the metronome
    # runs in a child of its own, like the consumers.

    def _fork_child(self, role: str, number: int = 1) -> int:
        connections.close_all()
        reset_connection(close=True)
        # SIGTERM and SIGINT are held across the fork: one sent to the child
        # before it runs Python again would be dropped (Python clears the
        # signals a child took while forking), so it stays pending until the
        # child's own handlers are in place.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
        pid = os.fork()
        if pid:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
            return pid
        code = 0
        try:
            # A parent stopped before it forked passes its stop on.
            stopped = self.stop
            self.stop, self._slot_index = threading.Event(), number - 1
            self._install_signals()
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
            if stopped.is_set():
                self.stop.set()
            if role == "metronome":
                self._run_here(metronome=True, consumers=False)
            else:
                self._run_here(metronome=False, consumers=True, replaceable=True)
            code = self.exit_code
        except BaseException:  # noqa: BLE001 - a child must never return into the parent's code
            log.exception("%s process failed", role)
            code = 1
        finally:
            logging.shutdown()
            os._exit(code)
        return 0  # unreachable

    def _supervise(self) -> None:
        roles = ["consumer"] * self.options.processes
        if self.options.metronome and not self.options.burst:
            roles.append("metronome")
        elif self.options.metronome:
            self._run_here(metronome=True, consumers=False)  # burst: one beat, no threads
            reset_connection(close=True)
        slots = [ChildSlot(role, number) for number, role in enumerate(roles, 1)]
        for slot in slots:
            if self.stop.is_set():
                break  # Stopped while starting them: start no more.
            self._start(slot)
        while not self.stop.is_set():
            now = time.monotonic()
            for slot in slots:
                if slot.pid is None and slot.due is not None and slot.due <= now:
                    self._start(slot)
            if not any(s.pid or s.due is not None for s in slots):
                break
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:  # every slot is waiting out its restart delay
                pid = 0
            if pid == 0:
                waits = [s.due - now for s in slots if s.pid is None and s.due is not None]
                time.sleep(max(0.0, min([0.1, *waits])))
                continue
            slot = next((s for s in slots if s.pid == pid), None)
            if slot is None:
                continue
            self._exited(slot, os.waitstatus_to_exitcode(status))
            if slot.due is None and not any(
                    s.role == "consumer" and (s.pid or s.due is not None) for s in slots):
                break  # Every consumer drained its share: stop the metronome too.
        self._stop_children({s.pid for s in slots if s.pid})

    def _start(self, slot: ChildSlot) -> None:
        slot.pid, slot.started, slot.due = self._fork_child(slot.role, slot.number), time.monotonic(), None

    def _exited(self, slot: ChildSlot, code: int) -> None:
        """Plan the slot's next start after its child exited with ``code``."""
        pid = slot.pid
        if slot.role == "consumer" and code == 0 and (self.options.burst or self.options.max_jobs):
            slot.pid = None  # It drained its share: not started again.
            return
        now = time.monotonic()
        lived_s = now - slot.started
        delay_s = slot.exited(now)
        slot.due = now + delay_s
        if delay_s == 0:
            log.warning("%s process %d exited with %d; starting a new one (slot %d)",
                        slot.role, pid, code, slot.number)
        else:
            log.warning("%s process %d exited with %d; starting a new one in %.1f s (slot %d: "
                        "exit %d in a row within %.0f s of a start, this one after %.1f s)",
                        slot.role, pid, code, delay_s, slot.number, slot.quick_exits,
                        RESTART_STABLE_S, lived_s)

    def _stop_children(self, children: set[int]) -> None:
        for pid in children:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + self.grace_s + 5
        while children and time.monotonic() < deadline:
            pid, _ = os.waitpid(-1, os.WNOHANG)
            if pid:
                children.discard(pid)
            else:
                time.sleep(0.05)
        for pid in children:
            log.error("process %d did not stop in time; killing it", pid)
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
