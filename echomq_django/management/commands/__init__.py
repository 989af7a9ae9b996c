"""manage.py commands: echomq_server, runechomq."""
