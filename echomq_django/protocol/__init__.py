"""The wire protocol that docs/protocol.md describes.

- :mod:`.keyspace`: every key name, built in one place.
- :mod:`.ids`: branded, mint-ordered ids.
- :mod:`.scripts`: loads ``lua/<area>/<name>.lua``, checks headers, runs them
  by SHA and maps their error codes to exceptions.
- :mod:`.jobs`: :class:`Jobs`, a job's life (enqueue ... ack, retry, dead).
- :mod:`.queues`: :class:`Queues`, queue-wide control (pause, resume).
- :mod:`.presence`: :class:`Presence`, live runechomq processes.
- :mod:`.records`: the typed answers (:class:`Claim`, :class:`JobRow`, :class:`Outcome`).
- :mod:`.clock`: the server clock read from Python.

Nothing here knows threads, Django requests or settings.
"""
