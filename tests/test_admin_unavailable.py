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


def free_port():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_cluster_no_node_of_which_answers_is_503_without_building_a_client(changer, queue):
    """redis-py raises RedisClusterException (not a RedisError) when it cannot
    build a cluster client; the 503 page names the seeds from the setting
    without connecting again, and without the password."""
    seeds = f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}"
    with override_settings(ECHOMQ={"URL": f"redis+cluster://:s3cret@{seeds}",
                                   "QUEUES": [queue]}):
        for page in (ADMIN, f"{ADMIN}{queue}/pending/", f"{ADMIN}{queue}/lanes/"):
            response = changer.get(page)
            assert response.status_code == 503, page
            text = response.content.decode()
            assert f"redis+cluster://:***@{seeds}" in text
            assert "s3cret" not in text
            assert "RedisClusterException" in text
        response = changer.post(f"{ADMIN}{queue}/action/pause/")
        assert response.status_code == 503
        assert "may or may not have been carried out" in response.content.decode()


def test_a_query_password_is_not_shown(changer, start_valkey, queue):
    url, proc = start_valkey()
    kill(proc)
    with override_settings(ECHOMQ={"URL": url + "?password=s3cret", "QUEUES": [queue]}):
        response = changer.get(ADMIN)
    assert response.status_code == 503
    text = response.content.decode()
    assert "s3cret" not in text
    assert url.split("//")[1].split("/")[0] in text  # the host:port is named


def test_a_busy_server_refuses_and_the_page_says_nothing_was_done(
        changer, own_server, queue):
    """BUSY (a script past busy-reply-threshold) has no redis-py class, and in
    a pipeline redis-py puts its own words before the server's."""
    import threading

    url, port, proc = own_server
    conn = get_connection()
    conn.config_set("busy-reply-threshold", 50)
    looper = redis.Redis.from_url(url)
    loop = threading.Thread(target=lambda: _swallow(lambda: looper.eval(
        "while true do redis.call('TIME') end", 0)), daemon=True)
    loop.start()
    probe = redis.Redis.from_url(url)
    try:
        wait_busy(probe)
        overview = changer.get(ADMIN)  # its reads are one pipeline
        assert overview.status_code == 503
        text = overview.content.decode()
        assert "refuses requests for now" in text and "BUSY" in text
        action = changer.post(f"{ADMIN}{queue}/action/pause/")
        assert action.status_code == 503
        assert "The action was not carried out" in action.content.decode()
    finally:
        probe.script_kill()
        loop.join(10)
        looper.close()
        probe.close()
    assert changer.get(ADMIN).status_code == 200
    assert not conn.exists(f"emq:{{{queue}}}:paused")


def _swallow(call):
    try:
        call()
    except redis.RedisError:
        pass  # SCRIPT KILL ends it with an error


def wait_busy(client):
    import time

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            client.ping()
        except redis.ResponseError as err:
            if str(err).startswith("BUSY"):
                return
            raise
        time.sleep(0.01)
    raise AssertionError("the server never said BUSY")


def test_a_replica_refuses_an_action_and_the_page_says_nothing_was_done(
        changer, start_valkey, queue):
    primary_url, _ = start_valkey()
    replica_url, _ = start_valkey()
    host, port = primary_url.split("//")[1].split("/")[0].split(":")
    redis.Redis.from_url(replica_url).replicaof(host, port)
    with override_settings(ECHOMQ={"URL": replica_url, "QUEUES": [queue]}):
        assert changer.get(ADMIN).status_code == 200  # reads are served
        response = changer.post(f"{ADMIN}{queue}/action/pause/")
    assert response.status_code == 503
    text = response.content.decode()
    assert "ReadOnlyError" in text and "The action was not carried out" in text


def test_a_refused_password_is_a_fault_to_see_not_an_outage(changer, start_valkey, queue):
    url, _ = start_valkey()
    redis.Redis.from_url(url).config_set("requirepass", "right")
    wrong = url.replace("redis://", "redis://:wrong@")
    with override_settings(ECHOMQ={"URL": wrong, "QUEUES": [queue]}):
        with pytest.raises(redis.AuthenticationError):
            changer.get(ADMIN)


def test_a_live_refresh_answered_503_is_not_logged_a_page_load_is(
        changer, own_server, queue, caplog):
    url, port, proc = own_server
    kill(proc)
    with caplog.at_level("ERROR", logger="django.request"):
        assert changer.get(ADMIN, {"fragment": "1"}).status_code == 503
        assert changer.get(ADMIN, {"fragment": "1"}).status_code == 503
        assert [r for r in caplog.records if r.name == "django.request"] == []
        assert changer.get(ADMIN).status_code == 503
    logged = [r for r in caplog.records if r.name == "django.request"]
    assert len(logged) == 1 and "Service Unavailable" in logged[0].getMessage()
