"""The persistence floor's workers that run beside the metronome
(docs/durability.md): the outbox relay (always: an enqueue may choose the
outbox per call) and the archiver (``ECHOMQ["ARCHIVE"]``), each a thread of the metronome's process,
started and stopped with it. Each has ``start()``, ``stop()`` and
``join(timeout_s)``; none touches the database on a job's path.
"""

from __future__ import annotations

from typing import Any

__all__ = ["floor_services", "stop_all"]


def floor_services(conn: Any, queues: list[str], config: Any, outage: Any) -> list[Any]:
    """The floor's workers ``config`` asks for, not yet started."""
    from .relay import Relay

    # Always: an enqueue may choose the outbox per call (using(outbox=True))
    # whatever the setting; with no outbox table the relay only looks again
    # once a minute.
    services: list[Any] = [Relay(conn, outage=outage)]
    if config.archive is not None:
        from .archiver import Archiver

        services.append(Archiver(conn, queues, config.archive, outage=outage))
    return services


def stop_all(services: list[Any], timeout_s: float = 5.0) -> None:
    """Ask every service to stop, then wait for each (at most ``timeout_s``)."""
    for service in services:
        service.stop()
    for service in services:
        service.join(timeout_s)
