"""What ``./manage.py runechomq`` runs.

- :mod:`.consumer`: the claim loop, N threads per process.
- :mod:`.outcome`: one claimed job: handler result or exception -> protocol call.
- :mod:`.lease_keeper`: the heartbeat: renew leases, time limits, presence.
- :mod:`.metronome`: the per-queue beat: promote, reap, pump recurrences.
- :mod:`.supervisor`: processes, signals, fork hygiene, shutdown.
"""
