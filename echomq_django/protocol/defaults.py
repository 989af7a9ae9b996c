"""The protocol's defaults for retention, stalls and payload size.

The consumer overrides them from settings (docs/protocol.md, "Results and
retention"); :mod:`echomq_django.protocol.jobs` re-exports them.
"""

__all__ = ["DEFAULT_KEEP_MS", "DEFAULT_DEAD_TTL_MS", "DEFAULT_DEAD_MAX", "DEFAULT_MAX_STALLS",
           "DEFAULT_MAX_PAYLOAD_BYTES"]

#: Defaults the consumer overrides from settings (docs/protocol.md, "Results and retention").
DEFAULT_KEEP_MS = 86_400_000
DEFAULT_DEAD_TTL_MS = 604_800_000
DEFAULT_DEAD_MAX = 10_000
DEFAULT_MAX_STALLS = 1
#: The default largest payload (bytes of UTF-8), as ECHOMQ["MAX_PAYLOAD_BYTES"].
DEFAULT_MAX_PAYLOAD_BYTES = 524_288
