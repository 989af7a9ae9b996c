"""The dashboard while the EchoMQ server does not answer: every page answers
503 with the server (no password) and the error, a live refresh answers 503
marked ``X-EchoMQ-Unavailable``, an action says it may not have been carried
out, and the pages come back once the server answers again. A server error
that does not pass on its own (WRONGTYPE) is still raised.

Each test runs its own valkey-server, SIGKILLs it and starts it again on the
same port (docs/admin.md, "When the server does not answer").
"""

from __future__ import annotations

import pytest
import redis
from django.contrib.auth.models import Permission
from django.test import Client, override_settings

from echomq_django import Jobs
from echomq_django.connection import get_connection
from echomq_django.protocol.ids import BrandedId

pytestmark = pytest.mark.django_db

ADMIN = "/admin/echomq_django/queue/"


@pytest.fixture
def changer(django_user_model):
    user = django_user_model.objects.create_user(username="ops", password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="echomq_django", codename__in=["view_queue", "change_queue"]))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def own_server(start_valkey, queue):
    """A valkey-server of this test's own, as the ECHOMQ setting; yields
    (url, port, proc)."""
    url, proc = start_valkey()
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    with override_settings(ECHOMQ={"URL": url, "QUEUES": [queue]}):
        yield url, port, proc


def pages(queue, job_id):
    return [ADMIN, f"{ADMIN}{queue}/pending/", f"{ADMIN}{queue}/schedule/",
            f"{ADMIN}{queue}/active/", f"{ADMIN}{queue}/dead/", f"{ADMIN}{queue}/repeat/",
            f"{ADMIN}{queue}/lanes/", f"{ADMIN}{queue}/job/{job_id}/"]


def kill(proc):
    proc.kill()
    proc.wait()


def test_every_page_answers_503_while_the_server_is_down_and_comes_back(
        changer, own_server, start_valkey, queue):
    url, port, proc = own_server
    job_id = BrandedId.generate()
    Jobs(get_connection()).enqueue(queue, job_id, '{"job": "x", "args": [], "kwargs": {}}')
    for page in pages(queue, job_id):
        assert changer.get(page).status_code == 200, page

    kill(proc)
    for page in pages(queue, job_id):
        response = changer.get(page)
        assert response.status_code == 503, page
        assert response["Retry-After"] == "2"
        assert response["X-EchoMQ-Unavailable"] == "1"
        text = response.content.decode()
        assert f"The EchoMQ server at <code>{url}</code> is not answering" in text, page
        assert "ConnectionError" in text
        assert 'data-unavailable="1"' in text  # the stand-in page reloads itself
        assert "comes back by itself" in text
        fragment = changer.get(page, {"fragment": "1"})
        assert fragment.status_code == 503, page
        assert fragment["X-EchoMQ-Unavailable"] == "1"
        assert "X-EchoMQ-Live" not in fragment  # live.js keeps what the page shows
        assert "<html" not in fragment.content.decode()
        assert "is not answering" in fragment.content.decode()

    start_valkey(port=port)  # empty: the job is gone with the killed server
    assert changer.get(ADMIN).status_code == 200
    assert changer.get(f"{ADMIN}{queue}/pending/").status_code == 200
    assert changer.get(f"{ADMIN}{queue}/job/{job_id}/").status_code == 404


def test_an_action_while_the_server_is_down_says_it_may_not_have_run(
        changer, own_server, start_valkey, queue):
    url, port, proc = own_server
    job_id = BrandedId.generate()
    back = f"{ADMIN}{queue}/dead/"
    kill(proc)
    response = changer.post(f"{ADMIN}{queue}/action/retry/", {"job": job_id, "next": back})
    assert response.status_code == 503
    text = response.content.decode()
    assert "may or may not have been carried out" in text
    assert f'href="{back}"' in text
    assert 'data-unavailable' not in text  # a POST's answer never reloads itself
    # A next that is not local links to the queue's pending page instead.
    response = changer.post(f"{ADMIN}{queue}/action/pause/",
                            {"next": "https://elsewhere.example/"})
    assert response.status_code == 503
    assert f'href="{ADMIN}{queue}/pending/"' in response.content.decode()

    start_valkey(port=port)
    response = changer.post(f"{ADMIN}{queue}/action/pause/", {"next": back})
    assert response.status_code == 302
    assert get_connection().exists(f"emq:{{{queue}}}:paused")


def test_a_server_error_that_does_not_pass_is_still_raised(changer, own_server, queue):
    conn = get_connection()
    conn.set(f"emq:{{{queue}}}:pending", "not a sorted set")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        changer.get(f"{ADMIN}{queue}/pending/")


def test_a_stopped_server_holds_a_page_for_the_socket_timeout_then_503(
        changer, start_valkey, queue):
    """SIGSTOP: the server accepts connections but never answers."""
    import os
    import signal
    import time

    url, proc = start_valkey()
    with override_settings(ECHOMQ={"URL": url + "?socket_timeout=0.5", "QUEUES": [queue]}):
        assert changer.get(f"{ADMIN}{queue}/pending/").status_code == 200
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            start = time.monotonic()
            response = changer.get(f"{ADMIN}{queue}/pending/")
            waited_s = time.monotonic() - start
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        assert response.status_code == 503
        assert "TimeoutError" in response.content.decode()
        assert waited_s < 10  # a few socket timeouts (redis-py retries once), not forever
        assert changer.get(f"{ADMIN}{queue}/pending/").status_code == 200
