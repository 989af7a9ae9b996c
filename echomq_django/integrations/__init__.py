"""Where EchoMQ meets the rest of a Django project, each in a module of its
own that the core never imports: the ``django.tasks`` backend, the outbox,
the archive and metrics, as they land."""
