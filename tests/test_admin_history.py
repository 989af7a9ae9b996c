"""The archive's history in the admin (issue 13, item 4; docs/admin.md,
"History"): Django's changelist of JobRecord, filtered and searched, a
read-only detail page with each attempt's error, view-only permissions, and
the links from the live pages. The records are written by the real archiver
from jobs that really ended on the test server."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from echomq_django import BrandedId, Jobs, Queues
from echomq_django.api import payload
from echomq_django.durability import Archive
from echomq_django.models import JobRecord
from echomq_django.protocol.records import Finish
from echomq_django.runtime.archiver import Archiver

pytestmark = pytest.mark.django_db(transaction=True)

TRACE = 'Traceback (most recent call last):\n  File "send.py", line 9\nValueError: {}\n'


def archive_some(conn, queue) -> dict[str, str]:
    """Three jobs of ``queue`` end (done in lane chat-7, dead after two failed
    attempts, cancelled) and the archiver records them; returns their ids."""
    jobs = Jobs(conn)
    Queues(conn).set_archive(queue, 1000)
    archiver = Archiver(conn, [queue], Archive(86_400_000, 1000, 1000), consumer="t")
    archiver.pass_once()
    ids = {"done": BrandedId.generate(), "dead": BrandedId.generate(),
           "cancelled": BrandedId.generate()}
    enc = lambda *a, **k: payload.encode("notifications.deliver", a, k, 1 << 20)  # noqa: E731
    jobs.enqueue(queue, ids["done"], enc("chat-7", text="round over"), group="chat-7")
    claim = jobs.claim(queue, "host:1", 60_000)
    jobs.ack(queue, claim.job_id, claim.token, {"sent": True})
    jobs.enqueue(queue, ids["dead"], enc("chat-9", text="blocked bot"))
    for n, op in ((1, "retry"), (2, "dead")):
        claim = jobs.claim(queue, f"host:{n}", 60_000)
        jobs.finish_many(queue, [Finish(op, claim.job_id, claim.token, reason="failed",
                                        error=TRACE.format(f"503 call {n}"),
                                        error_class="builtins.ValueError")])
        jobs.promote(queue)
    jobs.enqueue(queue, ids["cancelled"], enc("chat-3", text="never sent"))
    jobs.cancel(queue, ids["cancelled"])
    assert archiver.pass_once() == 3
    return ids


@pytest.fixture
def reader(django_user_model):
    user = django_user_model.objects.create_user(username="reader", password="pw",
                                                 is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="echomq_django", codename__in=["view_jobrecord",
                                                                "view_queue"]))
    client = Client()
    client.force_login(user)
    return client


def changelist():
    return reverse("admin:echomq_django_jobrecord_changelist")


def test_the_history_filters_by_state_lane_and_queue_and_searches(conn, queue, reader):
    ids = archive_some(conn, queue)
    other = archive_some(conn, queue + "-b")
    page = reader.get(changelist(), {"queue__exact": queue}).content.decode()
    assert all(job_id in page for job_id in ids.values())
    assert not any(job_id in page for job_id in other.values())
    dead = reader.get(changelist(), {"queue__exact": queue, "state__exact": "dead"})
    assert [r.job_id for r in dead.context["cl"].result_list] == [ids["dead"]]
    lane = reader.get(changelist(), {"lane__exact": "chat-7", "queue__exact": queue})
    assert [r.job_id for r in lane.context["cl"].result_list] == [ids["done"]]
    by_id = reader.get(changelist(), {"q": ids["cancelled"]})
    assert [r.job_id for r in by_id.context["cl"].result_list] == [ids["cancelled"]]
    by_text = reader.get(changelist(), {"q": "blocked bot", "queue__exact": queue})
    assert [r.job_id for r in by_text.context["cl"].result_list] == [ids["dead"]]
    by_function = reader.get(changelist(), {"q": "notifications.deliver",
                                            "function__exact": "notifications.deliver",
                                            "queue__exact": queue})
    assert len(by_function.context["cl"].result_list) == 3
    assert reader.get(changelist(), {"finished_at__year": "1999"}).context[
        "cl"].result_list.count() == 0


def test_the_detail_page_shows_every_attempt_s_error_read_only(conn, queue, reader):
    ids = archive_some(conn, queue)
    record = JobRecord.objects.get(queue=queue, job_id=ids["dead"])
    url = reverse("admin:echomq_django_jobrecord_change", args=[record.pk])
    page = reader.get(url)
    assert page.status_code == 200
    html = page.content.decode()
    for n in (1, 2):
        assert f'data-attempt="{n}"' in html
        assert f"ValueError: 503 call {n}" in html
    assert "builtins.ValueError" in html and "Traceback (most recent call last)" in html
    assert "chat-9" in html and "blocked bot" in html
    assert 'name="_save"' not in html            # nothing to save
    before = JobRecord.objects.get(pk=record.pk).state
    assert reader.post(url, {"state": "done"}).status_code == 403
    assert reader.post(reverse("admin:echomq_django_jobrecord_delete",
                               args=[record.pk]), {"post": "yes"}).status_code == 403
    assert reader.get(reverse("admin:echomq_django_jobrecord_add")).status_code == 403
    assert JobRecord.objects.get(pk=record.pk).state == before == "dead"


def test_records_need_their_view_permission(conn, queue, django_user_model):
    archive_some(conn, queue)
    user = django_user_model.objects.create_user(username="ops", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(content_type__app_label="echomq_django",
                                                     codename="view_queue"))
    client = Client()
    client.force_login(user)
    assert client.get(changelist()).status_code == 403
    live = client.get(reverse("admin:echomq_django_set", args=[queue, "pending"]))
    assert live.status_code == 200 and "emq-history" not in live.content.decode()


def test_the_live_pages_link_each_queue_s_history(conn, queue, reader, settings, valkey_url):
    settings.ECHOMQ = {"URL": valkey_url, "QUEUES": [queue]}
    archive_some(conn, queue)
    link = f'{changelist()}?queue__exact={queue}'
    overview = reader.get(reverse("admin:echomq_django_queue_changelist")).content.decode()
    assert link in overview
    for page in ("pending", "dead"):
        html = reader.get(reverse("admin:echomq_django_set", args=[queue, page])).content
        assert f'href="{link}"'.encode() in html
    assert f'href="{link}"'.encode() in reader.get(
        reverse("admin:echomq_django_lanes", args=[queue])).content
