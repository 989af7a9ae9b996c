"""manage.py commands: runechomq, echomq_schedules, echomq_server."""
