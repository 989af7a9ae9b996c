"""Where EchoMQ meets another framework's API, each in a package of its own
that the core never imports: today ``tasks/``, the ``django.tasks`` backend
(:mod:`echomq_django.tasks` is its public home). The persistence floor (the
outbox, the archive) and the metrics are EchoMQ's own: ``api/admission.py``,
``runtime/relay.py``, ``runtime/archiver.py``, ``urls.py``."""
