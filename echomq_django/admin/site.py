"""Mount the dashboard in the Django admin: "EchoMQ > Queues" on the admin index.

Imported by the app config's ``ready()`` when ``django.contrib.admin`` is
installed (this package's ``__init__`` stays free of side effects).

:class:`QueueAdmin` replaces the model admin's usual pages (there is no table)
with the views of :mod:`.views` and :mod:`.dispatch`, each wrapped by the site's
``admin_view`` (login for anonymous users, CSRF, no caching):

- ``<admin>/echomq_django/queue/``: the overview
- ``<admin>/echomq_django/queue/<queue>/<set>/``: one set (pending, schedule,
  active, dead, repeat)
- ``<admin>/echomq_django/queue/<queue>/lanes/``: the queue's lanes
- ``<admin>/echomq_django/queue/<queue>/job/<job_id>/``: one job
- ``<admin>/echomq_django/queue/<queue>/action/<action>/``: POST only

Each answers 503 while the server does not answer (:mod:`.unavailable`).

The pages' modules are imported by the first request, not here: every process
of a project with the admin installed imports this module (runechomq too), and
only a web process serves the pages.

Permissions (docs/admin.md): ``echomq_django.view_queue`` to see,
``echomq_django.change_queue`` to act.

The archive's history (``JobRecord``, Django's own changelist, read-only) is
registered by :mod:`.history`, imported here.
"""

from django.contrib import admin
from django.urls import path, re_path

from ..models import Queue
from ..rules import QUEUE_NAME_PATTERN
from . import history  # noqa: F401  (registers JobRecordAdmin)
from .unavailable import answer_outages

_QUEUE = rf"(?P<queue>{QUEUE_NAME_PATTERN})"


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin):
    """The EchoMQ dashboard; adds and deletes of "queue objects" do not exist."""

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def get_urls(self):
        wrap = self.admin_site.admin_view
        return [
            path("", wrap(self.overview_view), name="echomq_django_queue_changelist"),
            re_path(rf"^{_QUEUE}/job/(?P<job_id>[^/]+)/$", wrap(self.job_view),
                    name="echomq_django_job"),
            re_path(rf"^{_QUEUE}/action/(?P<name>[a-z_]+)/$", wrap(self.action_view),
                    name="echomq_django_action"),
            re_path(rf"^{_QUEUE}/(?P<set_name>pending|schedule|active|dead|repeat)/$",
                    wrap(self.set_view), name="echomq_django_set"),
            re_path(rf"^{_QUEUE}/lanes/$", wrap(self.lanes_view), name="echomq_django_lanes"),
        ]

    @answer_outages
    def overview_view(self, request):
        from . import views

        return views.overview(request, self)

    @answer_outages
    def set_view(self, request, queue, set_name):
        from . import views

        return views.set_view(request, self, queue, set_name)

    @answer_outages
    def lanes_view(self, request, queue):
        from . import views

        return views.lanes_view(request, self, queue)

    @answer_outages
    def job_view(self, request, queue, job_id):
        from . import job_page

        return job_page.job(request, self, queue, job_id)

    @answer_outages
    def action_view(self, request, queue, name):
        from . import dispatch

        return dispatch.action(request, self, queue, name)
