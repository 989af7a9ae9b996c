"""EchoMQ for Django: delayed, recurring and retried jobs on Redis/Valkey sorted sets."""

__all__ = []
