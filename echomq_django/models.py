"""No tables: one unmanaged model that carries the admin dashboard's permissions.

``echomq_django.view_queue`` lets staff see the dashboard; ``change_queue``
lets them act (run now, retry, cancel, delete, pause, resume, purge). The
model also puts "Queues" under "EchoMQ" on the admin index. Nothing is ever
read from or written to a database table for it (docs/admin.md).
"""

from django.db import models


class Queue(models.Model):
    """The EchoMQ queues as the admin sees them; the data lives in Redis."""

    class Meta:
        managed = False
        default_permissions = ("view", "change")
        verbose_name = "queue"
        verbose_name_plural = "queues"
