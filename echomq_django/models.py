"""The app's models: the admin's permissions, and the persistence floor's two
tables (docs/durability.md).

- ``Queue``: unmanaged, no table: it carries the admin dashboard's
  permissions (``view_queue`` to look, ``change_queue`` to act) and puts
  "Queues" under "EchoMQ" on the admin index (docs/admin.md).
- ``OutboxEntry``: a job written in the caller's transaction, kept until it
  has ended: the relay in runechomq puts it on the bus, and puts it there
  again if the server loses it before its end (``ECHOMQ["OUTBOX"]``).
- ``JobRecord``: a job that ended (done, dead, cancelled), folded from the bus
  by the archiver in runechomq (``ECHOMQ["ARCHIVE"]``).
"""

from django.db import models


class Queue(models.Model):
    """The EchoMQ queues as the admin sees them; the data lives in Redis."""

    class Meta:
        managed = False
        default_permissions = ("view", "change")
        verbose_name = "queue"
        verbose_name_plural = "queues"


class OutboxEntry(models.Model):
    """One job of the outbox: what ``Jobs.enqueue_many`` takes for it. The
    relay admits entries in id order and marks them admitted; it deletes an
    entry once its job has ended, and admits it again if the server lost it
    (its epoch is gone). The job id makes a second admission a no-op
    (docs/durability.md, "Outbox")."""

    job_id = models.CharField(max_length=200, unique=True)
    queue = models.CharField(max_length=100)
    #: The checked JSON envelope, as the job row will hold it.
    payload = models.TextField()
    group = models.CharField(max_length=200, null=True, blank=True)
    priority = models.SmallIntegerField(default=0)
    #: A delay measured from admission on the server's clock, or an instant.
    delay_ms = models.BigIntegerField(null=True, blank=True)
    run_at_ms = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    #: When the job was put on the bus, and the queue's epoch then; the row is
    #: kept until the job has ended, so a server that loses its data before
    #: then gets the job again (docs/durability.md, "Outbox").
    admitted_at = models.DateTimeField(null=True, blank=True, db_index=True)
    epoch = models.CharField(max_length=32, blank=True, default="")

    class Meta:
        ordering = ["id"]
        verbose_name = "outbox entry"
        verbose_name_plural = "outbox entries"

    def __str__(self) -> str:
        return f"{self.queue}:{self.job_id}"


class JobRecord(models.Model):
    """A job that ended, as its row said then (docs/durability.md, "Archive").

    ``errors`` holds every failed attempt's error as ``{"attempt": n,
    "class": dotted path, "message": last line, "traceback": text}``."""

    STATES = [("done", "done"), ("dead", "dead"), ("cancelled", "cancelled")]

    job_id = models.CharField(max_length=200)
    queue = models.CharField(max_length=100)
    lane = models.CharField(max_length=200, blank=True, default="")
    function = models.CharField(max_length=300, blank=True, default="")
    args = models.JSONField(default=list, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=20, choices=STATES)
    reason = models.TextField(blank=True, default="")
    attempts = models.IntegerField(default=0)
    errors = models.JSONField(default=list, blank=True)
    result = models.JSONField(null=True, blank=True)
    enqueued_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    worker = models.CharField(max_length=200, blank=True, default="")
    archived_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-finished_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["queue", "job_id"],
                                               name="echomq_jobrecord_queue_job_id")]
        indexes = [models.Index(fields=["queue", "state", "finished_at"],
                                name="echomq_jobrec_q_state_fin"),
                   models.Index(fields=["function", "finished_at"],
                                name="echomq_jobrec_function_fin"),
                   models.Index(fields=["finished_at"], name="echomq_jobrec_finished")]
        verbose_name = "job record"
        verbose_name_plural = "job records"

    def __str__(self) -> str:
        return f"{self.queue}:{self.job_id} {self.state}"
