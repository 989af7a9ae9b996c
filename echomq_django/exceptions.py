"""The exceptions echomq-django raises: one root, one class per failure.

Scripts report failure with a code at the start of their error reply
(``EMQKIND ...``); :mod:`echomq_django.protocol.scripts` maps each code to one of the
classes below, in one place. See ``docs/protocol.md`` ("Error codes").
"""


class EchoMQError(Exception):
    """Root of every error echomq-django raises on purpose."""


class ConfigurationError(EchoMQError):
    """The ``ECHOMQ`` setting is invalid; the message names the key and the rule."""


class EmbeddedServerError(EchoMQError):
    """The embedded Valkey server could not be started, found or stopped."""


class NotReplicatedError(EchoMQError):
    """Fewer replicas than ``ECHOMQ["REPLICAS"]["min"]`` confirmed an enqueue
    in time: the job is on the primary and may run, but it was not
    acknowledged, and a failover now may lose it
    (:mod:`echomq_django.protocol.replication`)."""


class KindError(EchoMQError, ValueError):
    """A job id is not in the ``JOB`` namespace (server code ``EMQKIND``)."""


class StaleTokenError(EchoMQError):
    """The fencing token no longer holds the job's lease (server code ``EMQSTALE``).

    Raised to a worker whose lease expired or was handed to another worker; the
    script that raised it changed nothing.
    """


class StateError(EchoMQError):
    """The job is not in a state that allows the operation (server code ``EMQSTATE``)."""


class NoSuchJobError(EchoMQError, LookupError):
    """The job row does not exist (server code ``EMQNOJOB``)."""


class UnknownJobError(EchoMQError, LookupError):
    """A payload names a job path that no ``@job`` registered in this process."""


class PayloadError(EchoMQError, TypeError):
    """A job's arguments cannot become the JSON payload (not JSON, or too large)."""


class PayloadTooLargeError(EchoMQError, ValueError):
    """A job's JSON payload is larger than ``ECHOMQ["MAX_PAYLOAD_BYTES"]``."""


class JobTimeoutError(EchoMQError, TimeoutError):
    """An attempt overran its job's ``timeout_ms`` (the class a timed-out
    attempt's error is kept under; the handler is not interrupted by it:
    docs/protocol.md, "Time limit")."""


class JobFailedError(EchoMQError):
    """A job whose result was asked for ended dead or cancelled; ``row`` is its JobRow."""

    def __init__(self, row) -> None:
        self.row = row
        super().__init__(f"job {row.job_id} ended {row.state}"
                         + (f" ({row.reason})" if row.reason else ""))


def class_path(err: BaseException) -> str:
    """The dotted path of ``err``'s class (``"builtins.ValueError"``), as a
    failed attempt's error is kept ("The job row": ``error_class.<n>``)."""
    kind = type(err)
    return f"{kind.__module__}.{kind.__qualname__}"
