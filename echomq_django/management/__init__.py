"""Management commands for echomq_django."""
