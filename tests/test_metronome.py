"""The metronome against a throwaway server that goes away and comes back
(the session's shared server is never stopped)."""

from __future__ import annotations

import logging
import re
import threading
import time

import redis

from echomq_django.connection.resilience import Outage
from echomq_django.runtime.metronome import Metronome
from tests.conftest import start_valkey_server, stop_valkey_server
from tests.procs import wait_for

BACK = re.compile(r"the test server is available again after ([0-9.]+) s")


class _Observed(Metronome):
    """A Metronome that says when its ticker has chosen a sleep."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.sleeping = threading.Event()

    def plan(self, queue: str, nudge: bool = False):
        plan = super().plan(queue, nudge)
        self.sleeping.set()
        return plan


def test_the_listener_reports_the_end_of_an_outage_when_it_ends(tmp_path, queue, caplog):
    url, proc = start_valkey_server(tmp_path)
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    probe = redis.Redis.from_url(url)
    conn = redis.Redis.from_url(url)
    beat = _Observed(conn, [queue], stop_event=threading.Event(),
                     outage=Outage("the test server"))
    caplog.set_level(logging.WARNING, logger="echomq.connection")
    try:
        beat.start()
        # Ready: the ticker beat once and, with nothing due, sleeps its
        # longest (30 s); the listener blocks on the beat list.
        wait_for(lambda: beat.sleeping.is_set()
                 and int(probe.info("clients")["blocked_clients"]) >= 1)
        proc.kill()
        proc.wait()
        down_at = time.monotonic()
        # The listener alone sees the outage (the ticker sleeps through it).
        wait_for(lambda: "the test server is unavailable" in caplog.text, timeout=10)
        _, proc = start_valkey_server(tmp_path, port=port)
        up_at = time.monotonic()
        # The listener reports the end within its backoff (at most 2 s), not
        # when the ticker next wakes, 30 s after it fell asleep.
        found = wait_for(lambda: BACK.search(caplog.text), timeout=10)
        reported_s = float(found.group(1))
        assert reported_s <= up_at - down_at + 3, caplog.text
        assert caplog.text.count("is unavailable") == 1
        assert caplog.text.count("is available again") == 1
    finally:
        beat.stop()
        beat.join(5)
        probe.close()
        conn.close()
        stop_valkey_server(proc)
