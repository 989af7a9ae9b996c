"""Prometheus metrics (docs/observability.md): the queues' gauges read from
the server at scrape time (:mod:`.queues`, served by :mod:`.views`), and each
runechomq process's job counters (:mod:`.process`, ``--metrics-port``)."""
