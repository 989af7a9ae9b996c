"""Helpers for tests that run ``runechomq`` as a real subprocess.

``runechomq(queue, *args)`` starts ``python -m django runechomq`` with
``tests.settings`` (which reads the test server's URL from the environment)
in a session of its own, so :func:`kill_all` reaches the children a
``--processes`` supervisor forked even when the supervisor is gone (they hold
its stdout open, and ``communicate()`` would wait for them forever). The
``worker_procs`` fixture in conftest.py kills whatever a test left running.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from echomq_django import Jobs

ROOT = Path(__file__).resolve().parent.parent


def runechomq(queue, *args, url=None, env=None, wrap=(), log_path=None, **popen):
    """Start runechomq serving ``queue``; stdout and stderr are one text pipe,
    or, with ``log_path``, one file (a process that logs a line per job fills
    a pipe nobody reads and blocks; :func:`stop` and :func:`kill_all` read
    the file back).
    ``url``: another server than the session's (a throwaway one), for the
    process and the test jobs it runs. ``env`` adds to (or overrides) the
    environment, e.g. ``ECHOMQ_TEST_SCHEDULES`` (see tests/settings.py).
    ``wrap`` prefixes the command (e.g. ``["faketime", "-f", "+300s"]``)."""
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="tests.settings", PYTHONPATH=str(ROOT),
               **(env or {}))
    if url is not None:
        env["ECHOMQ_TEST_SERVER_URL"] = url
    out = subprocess.PIPE if log_path is None else open(log_path, "a")
    try:
        proc = subprocess.Popen(
            [*wrap, sys.executable, "-m", "django", "runechomq", queue, *args],
            cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out,
            stderr=subprocess.STDOUT, text=True, start_new_session=True, **popen)
    finally:
        if log_path is not None:
            out.close()
    proc.log_path = log_path
    return proc


def _logged(proc) -> str:
    path = getattr(proc, "log_path", None)
    return Path(path).read_text() if path is not None else ""


def kill_all(proc) -> str:
    """SIGKILL ``proc`` and every process of its group; return its output."""
    for sig in (signal.SIGCONT, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
    if proc.stdout is None or proc.stdout.closed:  # a log file, or read already
        proc.wait()
        return _logged(proc)
    out, _ = proc.communicate()
    return out


def stop(proc, sig=signal.SIGTERM, timeout=20):
    """Send ``sig`` and wait; return ``(exit code, output)``. A process that
    does not stop within ``timeout`` s is killed and the test fails."""
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError("runechomq did not stop in time:\n" + kill_all(proc)) from None
    return proc.returncode, out if out is not None else _logged(proc)


def wait_for(predicate, timeout=15.0, step=0.02):
    """Poll ``predicate`` until it returns something true; return that."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"condition not met within {timeout} s")


def state_of(conn, queue, job_id):
    """The job's state, or None when its row does not exist."""
    row = Jobs(conn).get(queue, job_id)
    return row.state if row else None


@contextlib.contextmanager
def killing_connections(client, every_s=0.02):
    """While the block runs, ``CLIENT KILL`` every normal connection but
    ``client``'s own every ``every_s`` seconds (a flaky network: a connection
    lives about as long as the handshake and a few commands take under load,
    so a caller's three tries can all be cut at much shorter periods). On a
    cluster, on every primary."""
    from tests.nodes import primaries

    stop_killing = threading.Event()

    def killer():
        while not stop_killing.is_set():
            for node in primaries(client):
                node.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
            stop_killing.wait(every_s)

    thread = threading.Thread(target=killer)
    thread.start()
    try:
        yield
    finally:
        stop_killing.set()
        thread.join()
