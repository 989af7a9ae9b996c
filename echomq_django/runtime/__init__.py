"""What ``./manage.py runechomq`` runs.

- :mod:`.consumer`: the claim loop, N threads per process.
- :mod:`.outcome`: one claimed job: handler result or exception -> protocol call.
- :mod:`.finisher`, :mod:`.books`, :mod:`.slots`: outcomes recorded several per
  call with the next jobs claimed in it; capacity; the running jobs.
- :mod:`.lease_keeper`: the heartbeat: renew leases, time limits, presence.
- :mod:`.metronome`: the per-queue beat: promote, reap, pump recurrences.
- :mod:`.services`: beside the metronome, the outbox :mod:`.relay` and the
  :mod:`.archiver` (with :mod:`.archive_records`).
- :mod:`.observe`: the per-process Prometheus counters (``--metrics-port``).
- :mod:`.supervisor`, :mod:`.restarts`: processes, signals, fork hygiene,
  shutdown, restarts with backoff.
"""
