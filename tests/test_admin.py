"""The admin dashboard through Django's test client, against the real test server.

Permissions (anonymous, staff without permission, view, change), CSRF, GET
refused on actions, every action's effect on the sets, the pages' content,
and the number of Redis commands each page costs (INFO commandstats delta),
which must not grow with the size of the sets.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from tests import state
from django.contrib.auth.models import Permission
from django.test import Client, override_settings

from echomq_django.admin import reads as dashboard
from echomq_django.protocol import scripts
from echomq_django.admin.actions import BATCH, Actions
from echomq_django.protocol.ids import BrandedId
from echomq_django import Jobs
from echomq_django.protocol.keyspace import WAKE_CAP
from echomq_django.protocol.keyspace import Keyspace
from echomq_django.protocol.presence import Presence
from echomq_django import Queues
from echomq_django.repeat import Repeat
from tests import nodes

pytestmark = pytest.mark.django_db

ADMIN = "/admin/echomq_django/queue/"


def set_url(queue, set_name):
    return f"{ADMIN}{queue}/{set_name}/"


def job_url(queue, job_id):
    return f"{ADMIN}{queue}/job/{job_id}/"


def lanes_url(queue):
    return f"{ADMIN}{queue}/lanes/"


def action_url(queue, name):
    return f"{ADMIN}{queue}/action/{name}/"


def payload(*args):
    return json.dumps({"job": "tests.testapp.jobs.add", "args": list(args), "kwargs": {}})


@pytest.fixture
def make_staff(django_user_model):
    def make_staff(*codenames, username=None):
        user = django_user_model.objects.create_user(
            username=username or "staff-" + "-".join(codenames or ("none",)),
            password="pw", is_staff=True)
        for codename in codenames:
            user.user_permissions.add(Permission.objects.get(
                content_type__app_label="echomq_django", codename=codename))
        return user

    return make_staff


@pytest.fixture
def viewer(make_staff):
    client = Client()
    client.force_login(make_staff("view_queue"))
    return client


@pytest.fixture
def changer(make_staff):
    client = Client()
    client.force_login(make_staff("view_queue", "change_queue"))
    return client


@pytest.fixture
def configured(valkey_url, queue):
    with override_settings(ECHOMQ={"URL": valkey_url, "QUEUES": [queue]}):
        yield queue





def seed(conn, queue):
    """One job in each set, and one recurring schedule; returns their ids."""
    jobs = Jobs(conn)
    ids = {name: BrandedId.generate() for name in ("pending", "schedule", "active", "dead")}
    jobs.enqueue(queue, ids["active"], payload(1, 1))
    claim = jobs.claim(queue, "host:1", 60_000)
    assert claim.job_id == ids["active"]
    jobs.enqueue(queue, ids["dead"], payload(2, 2))
    dying = jobs.claim(queue, "host:1", 60_000)
    jobs.dead(queue, dying.job_id, dying.token, "failed",
              "Traceback (most recent call last):\nValueError: boom")
    jobs.enqueue(queue, ids["pending"], payload(3, 3))
    jobs.enqueue_in(queue, ids["schedule"], payload(4, 4), 600_000)
    Repeat(conn).register(queue, "nightly", cron="0 3 * * *", tz="Europe/Berlin",
                          template={"job": "tests.testapp.jobs.add", "args": [1, 2],
                                    "kwargs": {}})
    return ids


# -- where it lives and who may see it ---------------------------------------------


def test_admin_index_lists_echomq_queues_for_a_viewer(viewer):
    response = viewer.get("/admin/")
    assert response.status_code == 200
    text = response.content.decode()
    assert "EchoMQ" in text
    assert f'href="{ADMIN}"' in text and "Queues" in text


def test_pages_extend_the_admin_base_and_ship_their_own_static(viewer, configured, conn):
    ids = seed(conn, configured)
    for url in (ADMIN, set_url(configured, "schedule"), job_url(configured, ids["pending"])):
        text = viewer.get(url).content.decode()
        assert 'id="site-name"' in text  # admin/base_site.html
        assert "/static/echomq_django/live.js" in text
        assert "/static/echomq_django/dashboard.css" in text
        # No CDN: nothing is loaded from another origin.
        assert not re.search(r'(src|href)="(https?:)?//', text)


@pytest.mark.parametrize("url", [ADMIN, set_url("q1", "pending"), lanes_url("q1"),
                                 job_url("q1", "JOBX")])
def test_anonymous_is_sent_to_the_admin_login(client, url):
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/?next=")


def test_anonymous_post_acts_not_and_is_sent_to_login(client, conn, queue, redis_client):
    ids = seed(conn, queue)
    before = snapshot(redis_client, queue)
    response = client.post(action_url(queue, "run_now"), {"job": ids["schedule"]})
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    assert snapshot(redis_client, queue) == before


def test_staff_without_permission_gets_403_everywhere(make_staff, conn, queue, redis_client):
    ids = seed(conn, queue)
    client = Client()
    client.force_login(make_staff())
    for url in (ADMIN, set_url(queue, "dead"), lanes_url(queue), job_url(queue, ids["dead"])):
        assert client.get(url).status_code == 403, url
    before = snapshot(redis_client, queue)
    assert client.post(action_url(queue, "retry"), {"job": ids["dead"]}).status_code == 403
    assert snapshot(redis_client, queue) == before
    # Nor does the index offer it.
    assert f'href="{ADMIN}"' not in client.get("/admin/").content.decode()


def test_viewer_sees_every_page_but_no_buttons_and_may_not_act(viewer, configured, conn,
                                                               redis_client):
    queue = configured
    ids = seed(conn, queue)
    pages = [ADMIN, lanes_url(queue)] + [set_url(queue, s) for s in dashboard.SETS]
    pages += [job_url(queue, i) for i in ids.values()]
    for url in pages:
        response = viewer.get(url)
        assert response.status_code == 200, url
        assert "data-action=" not in response.content.decode(), url
    before = snapshot(redis_client, queue)
    for name, data in [("run_now", {"job": ids["schedule"]}), ("pause", {}),
                       ("purge_dead", {"confirm": "yes"})]:
        assert viewer.post(action_url(queue, name), data).status_code == 403, name
    assert snapshot(redis_client, queue) == before


def test_changer_sees_the_buttons(changer, conn, queue):
    ids = seed(conn, queue)
    text = changer.get(set_url(queue, "schedule")).content.decode()
    assert f'data-action="run_now" data-target="{ids["schedule"]}"' in text
    text = changer.get(set_url(queue, "dead")).content.decode()
    assert 'data-action="retry_all_dead"' in text and 'data-action="purge_dead"' in text


def test_get_pages_never_change_state(changer, configured, conn, redis_client):
    queue = configured
    ids = seed(conn, queue)
    before = snapshot(redis_client, queue)
    for url in [ADMIN, *[set_url(queue, s) for s in dashboard.SETS], lanes_url(queue),
                *[job_url(queue, i) for i in ids.values()],
                set_url(queue, "pending") + "?fragment=1", ADMIN + "?fragment=1",
                lanes_url(queue) + "?fragment=1"]:
        assert changer.get(url).status_code == 200, url
    assert snapshot(redis_client, queue) == before


@pytest.mark.parametrize("name", ["run_now", "retry", "cancel", "delete", "pause", "resume",
                                  "retry_all_dead", "purge_dead", "repeat_run_now",
                                  "repeat_remove"])
def test_get_on_an_action_is_refused(changer, conn, queue, redis_client, name):
    ids = seed(conn, queue)
    before = snapshot(redis_client, queue)
    response = changer.get(action_url(queue, name), {"job": ids["schedule"], "confirm": "yes",
                                                     "name": "nightly"})
    assert response.status_code == 405
    assert snapshot(redis_client, queue) == before


def test_csrf_is_enforced(make_staff, conn, queue, redis_client):
    ids = seed(conn, queue)
    client = Client(enforce_csrf_checks=True)
    client.force_login(make_staff("view_queue", "change_queue"))
    before = snapshot(redis_client, queue)
    response = client.post(action_url(queue, "run_now"), {"job": ids["schedule"]})
    assert response.status_code == 403
    assert snapshot(redis_client, queue) == before
    # With the token the page carries, the same POST acts.
    page = client.get(set_url(queue, "schedule")).content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    response = client.post(action_url(queue, "run_now"),
                           {"job": ids["schedule"], "csrfmiddlewaretoken": token})
    assert response.status_code == 302
    assert redis_client.zscore(Keyspace(queue).pending, ids["schedule"]) == 0


# -- actions -------------------------------------------------------------------------


def messages_of(response):
    return [str(m) for m in response.context["messages"]]


def test_run_now_moves_a_scheduled_job_to_pending(changer, conn, queue, redis_client):
    ids = seed(conn, queue)
    ks = Keyspace(queue)
    here = set_url(queue, "schedule")
    response = changer.post(action_url(queue, "run_now"), {"job": ids["schedule"], "next": here},
                            follow=True)
    assert response.redirect_chain[-1][0] == here
    assert any("moved from schedule to pending" in m for m in messages_of(response))
    assert redis_client.zscore(ks.schedule, ids["schedule"]) is None
    assert redis_client.zscore(ks.pending, ids["schedule"]) == 0
    assert redis_client.hget(ks.job(ids["schedule"]), "state") == "pending"
    assert redis_client.llen(ks.wake) >= 1
    # Again: it is no longer scheduled; nothing changes.
    response = changer.post(action_url(queue, "run_now"), {"job": ids["schedule"]}, follow=True)
    assert any("is not scheduled" in m for m in messages_of(response))


def test_run_now_makes_the_rows_run_at_now(changer, conn, queue, redis_client, server_time_ms):
    ids = seed(conn, queue)  # the scheduled job is due in 10 min
    ks = Keyspace(queue)
    before = server_time_ms()
    changer.post(action_url(queue, "run_now"), {"job": ids["schedule"]})
    run_at = int(redis_client.hget(ks.job(ids["schedule"]), "run_at_ms"))
    assert before <= run_at <= server_time_ms()
    text = changer.get(job_url(queue, ids["schedule"])).content.decode()
    timeline = re.search(r'<table class="emq-table" id="emq-timeline">(.*?)</table>', text,
                         re.S).group(1)
    assert " in " not in timeline  # nothing on this job's timeline lies ahead


def test_run_now_and_retry_on_a_paused_queue_say_it_is_paused(changer, conn, queue,
                                                              redis_client):
    ids = seed(conn, queue)
    Queues(conn).pause(queue)
    for name, data in (("run_now", {"job": ids["schedule"]}), ("retry", {"job": ids["dead"]}),
                       ("repeat_run_now", {"name": "nightly"})):
        response = changer.post(action_url(queue, name), data, follow=True)
        (text,) = messages_of(response)
        assert "runs next" not in text, text
        assert f"queue {queue} is paused" in text and "until the queue is resumed" in text, text
    assert redis_client.zscore(Keyspace(queue).pending, ids["schedule"]) == 0  # moved all the same
    Queues(conn).resume(queue)
    response = changer.post(action_url(queue, "repeat_run_now"), {"name": "nightly"},
                            follow=True)
    assert not any("paused" in m for m in messages_of(response))


def test_retry_moves_a_dead_letter_to_pending_with_attempts_reset(changer, conn, queue,
                                                                  redis_client):
    ids = seed(conn, queue)
    ks = Keyspace(queue)
    assert redis_client.pttl(ks.job(ids["dead"])) > 0
    redis_client.hset(ks.job(ids["dead"]), mapping={"snoozes": "7", "progress": "40"})
    response = changer.post(action_url(queue, "retry"), {"job": ids["dead"]}, follow=True)
    assert any("moved from dead to pending with attempts reset" in m
               for m in messages_of(response))
    row = redis_client.hgetall(ks.job(ids["dead"]))
    assert (row["state"], row["attempts"], row["stalls"]) == ("pending", "0", "0")
    assert row["snoozes"] == "0" and "progress" not in row
    assert "reason" not in row and "finished_at_ms" not in row
    assert "boom" in row["last_error"]
    assert redis_client.pttl(ks.job(ids["dead"])) == -1  # no longer expires as a dead letter
    assert redis_client.zscore(ks.dead, ids["dead"]) is None
    assert redis_client.zscore(ks.pending, ids["dead"]) == 0
    # The revived job is claimed like any other, as attempt 1.
    claims = {c.job_id: c for c in (Jobs(conn).claim(queue, "x", 1000) for _ in range(2))}
    assert claims[ids["dead"]].attempts == 1


def test_cancel_asks_first_then_cancels(changer, conn, queue, redis_client):
    ids = seed(conn, queue)
    ks = Keyspace(queue)
    before = snapshot(redis_client, queue)
    response = changer.post(action_url(queue, "cancel"), {"job": ids["schedule"]})
    assert response.status_code == 200
    text = response.content.decode()
    assert f"Cancel job {ids['schedule']}?" in text and 'name="confirm" value="yes"' in text
    assert snapshot(redis_client, queue) == before
    response = changer.post(action_url(queue, "cancel"),
                            {"job": ids["schedule"], "confirm": "yes"}, follow=True)
    assert any("cancelled; it will not run" in m for m in messages_of(response))
    assert redis_client.zscore(ks.schedule, ids["schedule"]) is None
    assert redis_client.hget(ks.job(ids["schedule"]), "state") == "cancelled"
    # A running job is flagged, not removed.
    response = changer.post(action_url(queue, "cancel"),
                            {"job": ids["active"], "confirm": "yes"}, follow=True)
    assert any("asked to stop" in m for m in messages_of(response))
    assert redis_client.hget(ks.job(ids["active"]), "cancel_requested") == "1"
    assert redis_client.zscore(ks.active, ids["active"]) is not None


def test_delete_asks_first_then_removes_row_and_members(changer, conn, queue, redis_client):
    ids = seed(conn, queue)
    ks = Keyspace(queue)
    before = snapshot(redis_client, queue)
    assert changer.post(action_url(queue, "delete"), {"job": ids["dead"]}).status_code == 200
    assert snapshot(redis_client, queue) == before
    for key in ("dead", "pending", "schedule"):
        response = changer.post(action_url(queue, "delete"),
                                {"job": ids[key], "confirm": "yes"}, follow=True)
        assert any(f"Job {ids[key]} deleted." in m for m in messages_of(response))
        assert not redis_client.exists(ks.job(ids[key]))
        assert redis_client.zscore(getattr(ks, key), ids[key]) is None
    # A running job is refused.
    response = changer.post(action_url(queue, "delete"),
                            {"job": ids["active"], "confirm": "yes"}, follow=True)
    assert any("is running; cancel it instead" in m for m in messages_of(response))
    assert redis_client.exists(ks.job(ids["active"]))


def test_pause_and_resume(changer, conn, queue, redis_client):
    ks = Keyspace(queue)
    Jobs(conn).enqueue(queue, BrandedId.generate(), payload(1, 2))
    response = changer.post(action_url(queue, "pause"), follow=True)
    assert any(f"Queue {queue} paused" in m for m in messages_of(response))
    assert redis_client.exists(ks.paused)
    assert Jobs(conn).claim(queue, "x", 1000) is None
    text = changer.get(set_url(queue, "pending")).content.decode()
    assert "emq-badge emq-paused" in text and 'data-action="resume"' in text
    response = changer.post(action_url(queue, "pause"), follow=True)
    assert any("was paused already" in m for m in messages_of(response))
    response = changer.post(action_url(queue, "resume"), follow=True)
    assert any(f"Queue {queue} resumed." in m for m in messages_of(response))
    assert not redis_client.exists(ks.paused)
    assert Jobs(conn).claim(queue, "x", 1000) is not None


def _dead_letters(redis_client, queue, n, died_at_ms):
    """``n`` dead letters with rows, written directly (as dead.lua leaves them)."""
    ks = Keyspace(queue)
    ids = [BrandedId.generate() for _ in range(n)]
    pipe = redis_client.pipeline(transaction=False)
    for i, job_id in enumerate(ids):
        pipe.hset(ks.job(job_id), mapping={"state": "dead", "attempts": 3, "reason": "failed",
                                           "payload": payload(i, i), "last_error": "boom",
                                           "finished_at_ms": died_at_ms})
        pipe.pexpire(ks.job(job_id), 3_600_000)
        pipe.zadd(ks.dead, {job_id: died_at_ms - i})
    pipe.execute()
    return ids


def test_retry_all_dead_runs_in_batches_and_moves_every_letter(changer, queue, redis_client,
                                                               server_time_ms):
    ks = Keyspace(queue)
    n = BATCH + 234
    ids = _dead_letters(redis_client, queue, n, server_time_ms() - 1000)
    # One letter whose row expired: dropped, not counted.
    redis_client.zadd(ks.dead, {"JOB-expired": server_time_ms() - 5000})
    assert changer.post(action_url(queue, "retry_all_dead"), {}).status_code == 200  # confirm
    assert redis_client.zcard(ks.dead) == n + 1
    response = changer.post(action_url(queue, "retry_all_dead"), {"confirm": "yes"}, follow=True)
    assert any(f"{n} dead job(s) of {queue} moved back to pending" in m
               for m in messages_of(response))
    assert redis_client.zcard(ks.dead) == 0
    assert redis_client.zcard(ks.pending) == n
    for job_id in (ids[0], ids[-1]):
        row = redis_client.hgetall(ks.job(job_id))
        assert (row["state"], row["attempts"]) == ("pending", "0")
        assert redis_client.pttl(ks.job(job_id)) == -1


def test_bulk_scripts_leave_letters_newer_than_the_cutoff(conn, queue, redis_client,
                                                          server_time_ms):
    ks = Keyspace(queue)
    now = server_time_ms()
    _dead_letters(redis_client, queue, 3, now - 10_000)
    newer = _dead_letters(redis_client, queue, 2, now + 60_000)
    moved, taken, cutoff = scripts.run(conn, "admin/retry_all_dead",
                                       [ks.dead, ks.pending, ks.wake],
                                       [ks.base, 1000, "", WAKE_CAP])
    assert (moved, taken) == (3, 3) and now <= int(cutoff) < now + 60_000
    assert sorted(redis_client.zrange(ks.dead, 0, -1)) == sorted(newer)
    removed, _ = scripts.run(conn, "admin/purge_dead", [ks.dead], [ks.base, 1000, cutoff])
    assert removed == 0
    with pytest.raises(ValueError, match="batch must be an integer in 1..1000"):
        scripts.run(conn, "admin/purge_dead", [ks.dead], [ks.base, 1001, ""])


def test_purge_dead_removes_letters_and_rows(changer, queue, redis_client, server_time_ms):
    ks = Keyspace(queue)
    n = BATCH + 10
    ids = _dead_letters(redis_client, queue, n, server_time_ms() - 1000)
    before = snapshot(redis_client, queue)
    response = changer.post(action_url(queue, "purge_dead"), {})
    assert "Purge every dead letter" in response.content.decode()
    assert snapshot(redis_client, queue) == before
    response = changer.post(action_url(queue, "purge_dead"), {"confirm": "yes"}, follow=True)
    assert any(f"{n} dead job(s) of {queue} purged" in m for m in messages_of(response))
    assert redis_client.zcard(ks.dead) == 0
    assert not redis_client.exists(ks.job(ids[0])) and not redis_client.exists(ks.job(ids[-1]))


def test_recurring_run_now_and_remove(changer, conn, queue, redis_client):
    seed(conn, queue)
    ks = Keyspace(queue)
    next_run = redis_client.zscore(ks.repeat, "nightly")
    response = changer.post(action_url(queue, "repeat_run_now"), {"name": "nightly"}, follow=True)
    (text,) = [m for m in messages_of(response) if "ran now as job" in m]
    job_id = re.search(r"job (JOB\w+)", text).group(1)
    assert redis_client.zscore(ks.pending, job_id) == 0
    assert redis_client.hget(ks.job(job_id), "repeat") == "nightly"
    assert redis_client.zscore(ks.repeat, "nightly") == next_run
    response = changer.post(action_url(queue, "repeat_remove"), {"name": "nightly"})
    assert "Remove the recurring schedule nightly?" in response.content.decode()
    assert redis_client.zscore(ks.repeat, "nightly") == next_run
    response = changer.post(action_url(queue, "repeat_remove"),
                            {"name": "nightly", "confirm": "yes"}, follow=True)
    assert any("Schedule nightly removed." in m for m in messages_of(response))
    assert redis_client.zscore(ks.repeat, "nightly") is None
    response = changer.post(action_url(queue, "repeat_run_now"), {"name": "nightly"}, follow=True)
    assert any("no recurring schedule 'nightly'" in m for m in messages_of(response))


def test_next_must_be_local(changer, conn, queue):
    ids = seed(conn, queue)
    response = changer.post(action_url(queue, "run_now"),
                            {"job": ids["schedule"], "next": "https://evil.example/"})
    assert response["Location"] == set_url(queue, "pending")


def test_unknown_action_and_bad_queue_are_404(changer):
    assert changer.post(action_url("q1", "explode"), {}).status_code == 404
    assert changer.get(f"{ADMIN}bad%20name/pending/").status_code == 404


# -- what the pages show -------------------------------------------------------------


def test_overview_shows_counts_paused_charts_histogram_and_live_processes(
        viewer, configured, conn, redis_client, server_time_ms):
    queue = configured
    ks = Keyspace(queue)
    seed(conn, queue)
    jobs = Jobs(conn)
    for delay in (1_000, 2_000, 400_000, 7_200_000):
        jobs.enqueue_in(queue, BrandedId.generate(), payload(0, 0), delay)
    Queues(conn).pause(queue)
    minute = server_time_ms() // 60_000
    redis_client.set(ks.stats("done", minute - 3), 7)
    redis_client.set(ks.stats("failed", minute - 3), 2)
    redis_client.set(ks.stats("dead", minute - 3), 1)
    redis_client.set(ks.stats("done", minute - 61), 1000)  # outside the hour
    redis_client.zadd(ks.latency, {f"{minute - 2}:1500": minute - 2,
                                   f"{minute - 90}:999000": minute - 90})  # outside too
    Presence(conn).announce("box:4242", {"host": "box", "pid": 4242, "queues": f"{queue},other-q",
                               "concurrency": 8, "busy": 3,
                               "started_at_ms": server_time_ms() - 90_000},
                  [queue, "other-q"], 10_000)
    try:
        response = viewer.get(ADMIN)
    finally:
        Presence(conn).retire("box:4242")
    text = response.content.decode()
    row = re.search(rf'<tr data-queue="{queue}">(.*?)</tr>', text, re.S).group(1)
    counts = dict(re.findall(r'data-set="(\w+)"><a [^>]*>(\d+)</a>', row))
    assert counts == {"pending": "1", "schedule": "5", "active": "1", "dead": "1", "repeat": "1"}
    assert "emq-badge emq-paused" in row
    # The seed's dead job counted now: one failed attempt and one dead more.
    assert "7 done" in row and "3 failed attempts" in row and "2 dead" in row, row
    assert "1000" not in row and "latency 1.5 s" in row
    # The last hour's charts: a value per minute to hover, on both.
    charts = re.search(rf'<section class="emq-charts" id="emq-charts-{queue}".*?</section>',
                       text, re.S).group(0)
    tips = re.findall(r'data-minute="(\d+)" data-tip="([^"]*)"', charts)
    assert len(tips) == 2 * 60
    tip = dict(tips[:60])[str(minute - 3)]
    assert tip.endswith(": 7 done · 2 failed attempts · 1 dead"), tip
    assert dict(tips[60:])[str(minute - 2)].endswith(": latency 1.5 s")
    assert dict(tips[60:])[str(minute - 1)].endswith(": no sample (no metronome ran)")
    assert "999000" not in charts and "16.6 min" not in charts
    assert "4 in the next hour" in row  # 1 s, 2 s, 400 s and the seed's 600 s; not 2 h
    assert "0-5 min: 2 scheduled" in row
    assert '<tr data-queue="other-q">' in text  # served by a live process
    worker = re.search(r'<tr data-worker="box:4242">(.*?)</tr>', text, re.S).group(1)
    assert "<td>box</td><td>4242</td>" in worker and "<td>8</td><td>3</td>" in worker
    assert "1 min 30 s" in worker or "1 min 31 s" in worker


def test_set_pages_show_each_sets_columns(viewer, conn, queue):
    ids = seed(conn, queue)
    text = viewer.get(set_url(queue, "schedule")).content.decode()
    assert ids["schedule"] in text and "tests.testapp.jobs.add" in text
    assert re.search(r'class="emq-due">in (9 min 5\d s|10 min)<', text)
    text = viewer.get(set_url(queue, "active")).content.decode()
    assert ids["active"] in text and "host:1" in text and "Lease deadline" in text
    text = viewer.get(set_url(queue, "dead")).content.decode()
    assert ids["dead"] in text and "failed" in text and "ValueError: boom" in text
    text = viewer.get(set_url(queue, "repeat")).content.decode()
    assert "nightly" in text and "<code>0 3 * * *</code>" in text and "Europe/Berlin" in text
    local_time = re.search(r"Europe/Berlin</td>\s*<td>\d{4}-\d\d-\d\d (\d\d:\d\d)", text).group(1)
    utc_time = re.search(r"</div></td>\s*<td>\d{4}-\d\d-\d\d (\d\d:\d\d):00 UTC</td>", text).group(1)
    assert local_time == "03:00" and utc_time in ("01:00", "02:00")


TRACEBACK = ("Traceback (most recent call last):\n"
             + "".join(f'  File "/srv/app/notify/jobs.py", line {n}, in deliver\n'
                       f"    send(chat_id, text)\n" for n in range(20))
             + "KeyError: chat-42\n\n")


def test_lists_show_the_errors_last_line_and_the_jobs_arguments(viewer, conn, queue):
    assert len(TRACEBACK.encode()) > 2 * dashboard.CUT_BYTES
    jobs = Jobs(conn)
    call = json.dumps({"job": "tests.testapp.jobs.add", "args": [7, "x"],
                       "kwargs": {"to": "chat-9"}})
    ids = {}
    for name in ("active", "dead", "schedule", "pending"):
        ids[name] = BrandedId.generate()
        jobs.enqueue(queue, ids[name], call)
        if name != "pending":
            claim = jobs.claim(queue, "host:1", 60_000)
            assert claim.job_id == ids[name]
        if name == "dead":
            jobs.dead(queue, claim.job_id, claim.token, "failed", TRACEBACK)
        if name == "schedule":
            jobs.retry(queue, claim.job_id, claim.token, 600_000, TRACEBACK)
    for name in ("pending", "schedule", "active", "dead"):
        text = viewer.get(set_url(queue, name)).content.decode()
        row = re.search(rf'<tr data-job="{ids[name]}">(.*?)</tr>', text, re.S).group(1)
        assert "7, &quot;x&quot;, to=&quot;chat-9&quot;" in row, name
        if name in ("schedule", "dead"):
            assert "KeyError: chat-42" in row, name
            assert "Traceback" not in row, name
    (row,) = dashboard.set_page(conn, queue, "dead").rows
    assert row.error == "KeyError: chat-42"


def test_pending_pages_in_claim_order_and_dead_newest_first(viewer, conn, queue, redis_client,
                                                           server_time_ms):
    jobs = Jobs(conn)
    ids = sorted(BrandedId.generate() for _ in range(120))
    for job_id in reversed(ids):  # admission order does not matter: claim order is by id
        jobs.enqueue(queue, job_id, payload(0, 0))
    text = viewer.get(set_url(queue, "pending") + "?page=3").content.decode()
    shown = re.findall(r'<tr data-job="(\w+)">', text)
    assert shown == ids[100:120]
    assert "101–120 of 120" in text and "page 3 of 3" in text
    assert jobs.claim(queue, "x", 1000).job_id == ids[0]
    dead = _dead_letters(redis_client, queue, 5, server_time_ms())  # scores now, now-1, ...
    text = viewer.get(set_url(queue, "dead")).content.decode()
    assert re.findall(r'<tr data-job="(\w+)">', text) == dead


def test_an_unknown_queues_page_says_it_is_unknown(changer, configured, conn, queue):
    import uuid

    nosuch = "t-nosuch-" + uuid.uuid4().hex[:8]
    response = changer.get(ADMIN, {"queue": nosuch}, follow=True)  # looked up by name
    assert response.status_code == 200
    text = response.content.decode()
    assert 'id="emq-unknown"' in text
    assert f"Queue {nosuch} is unknown" in text
    assert "emq-running" not in text and 'data-action="pause"' not in text
    # A configured queue is known, empty or not.
    assert 'id="emq-unknown"' not in changer.get(set_url(configured, "dead")).content.decode()
    # So is a queue that holds something, or that a live process serves.
    held, served = "t-held-" + uuid.uuid4().hex[:8], "t-served-" + uuid.uuid4().hex[:8]
    Jobs(conn).enqueue_in(held, BrandedId.generate(), payload(1), 60_000)
    Presence(conn).announce("box:77", {"host": "box", "pid": 77}, [served], 10_000)
    try:
        for name in (held, served):
            text = changer.get(set_url(name, "pending")).content.decode()
            assert 'id="emq-unknown"' not in text and "emq-running" in text, name
    finally:
        Presence(conn).retire("box:77")


def test_lookup_by_id(viewer, conn, queue):
    ids = seed(conn, queue)
    response = viewer.get(set_url(queue, "pending"), {"id": ids["dead"]})
    assert response.status_code == 302 and response["Location"] == job_url(queue, ids["dead"])
    response = viewer.get(set_url(queue, "pending"), {"id": "JOBnope"}, follow=True)
    assert any("No job JOBnope" in m for m in messages_of(response))
    assert response.redirect_chain[-1][0] == set_url(queue, "pending")
    assert viewer.get(job_url(queue, "JOBnope")).status_code == 404


def test_job_detail_shows_row_payload_error_and_timeline(viewer, conn, queue):
    ids = seed(conn, queue)
    text = viewer.get(job_url(queue, ids["dead"])).content.decode()
    assert 'id="emq-job-state">dead<' in text
    assert "Traceback (most recent call last):\nValueError: boom" in text
    assert "&quot;job&quot;: &quot;tests.testapp.jobs.add&quot;" in text  # pretty-printed
    assert "&quot;args&quot;: [\n    2,\n    2\n  ]" in text
    for label in ("enqueued", "started (last claim)", "finished"):
        assert f'<th scope="row">{label}</th>' in text
    assert "row expires in" in text
    text = viewer.get(job_url(queue, ids["schedule"])).content.decode()
    assert '<th scope="row">due (run-at)</th>' in text
    text = viewer.get(job_url(queue, ids["active"])).content.decode()
    assert '<th scope="row">lease deadline</th>' in text and "host:1" in text


def test_job_timeline_is_in_time_order(viewer, conn, queue):
    jobs = Jobs(conn)
    job_id = BrandedId.generate()
    jobs.enqueue(queue, job_id, payload(1, 2))
    first = jobs.claim(queue, "host:1", 60_000)
    jobs.retry(queue, job_id, first.token, 0, "Traceback (most recent call last):\nKeyError: 1")
    time.sleep(0.01)
    assert jobs.promote(queue) == 1
    assert jobs.claim(queue, "host:1", 60_000).job_id == job_id  # started after the failure
    text = viewer.get(job_url(queue, job_id)).content.decode()
    timeline = re.search(r'id="emq-timeline">(.*?)</table>', text, re.S).group(1)
    labels = re.findall(r'<th scope="row">([^<]+)</th>', timeline)
    assert labels.index("last failure") < labels.index("started (last claim)"), labels
    row = jobs.get(queue, job_id)
    times = {"enqueued": row.enqueued_at_ms, "due (run-at)": row.run_at_ms,
             "started (last claim)": row.started_at_ms, "last failure": row.failed_at_ms,
             "lease deadline": row.lease_until_ms}
    assert [times[label] for label in labels] == sorted(times.values())


STAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"


def test_every_time_shown_says_its_zone(viewer, configured, conn):
    queue = configured
    ids = seed(conn, queue)
    with override_settings(TIME_ZONE="Europe/Berlin"):
        pages = {"overview": viewer.get(ADMIN),
                 **{s: viewer.get(set_url(queue, s)) for s in dashboard.SETS},
                 "lanes": viewer.get(lanes_url(queue)),
                 "job": viewer.get(job_url(queue, ids["dead"]))}
    for name, response in pages.items():
        text = response.content.decode()
        assert re.search(rf"Server time {STAMP} CES?T\.", text), name
        # Every full time stamp on the page is followed by its zone.
        stamps = re.findall(rf"{STAMP}(?: ([A-Z]{{3,4}}))?", text)
        assert stamps and all(zone in ("CET", "CEST", "UTC") for zone in stamps), (name, stamps)
    text = pages["schedule"].content.decode()
    assert re.search(rf"<td>{STAMP} CES?T</td>", text)  # the run-at, in Berlin time
    text = pages["repeat"].content.decode()
    assert re.search(rf"<td>{STAMP} UTC</td>", text)  # next run (UTC)
    text = pages["overview"].content.decode()
    assert re.search(r"data-tip=\"\d\d:\d\d CES?T: 0 done · 0 failed attempts · 0 dead\"", text)  # chart minutes


def test_fragment_is_the_live_part_only(viewer, conn, queue):
    seed(conn, queue)
    response = viewer.get(set_url(queue, "schedule"), {"fragment": "1"})
    assert response["X-EchoMQ-Live"] == "1"
    text = response.content.decode()
    assert "<html" not in text and 'id="emq-rows"' in text
    # Its forms point back at the page, not at the fragment.
    assert "fragment" not in text


# -- lanes ----------------------------------------------------------------------------


def _lanes_are_counted_true(redis_client, ks, lanes):
    """The lanes index and its total agree with the lanes' own sets (read the
    long way, test-only); returns the total."""
    sizes = {lane: redis_client.zcard(ks.lane_pending(lane or None)) for lane in lanes}
    index = {lane: int(n) for lane, n in redis_client.zrange(ks.lanes, 0, -1, withscores=True)}
    assert index == {lane: n for lane, n in sizes.items() if n}, (index, sizes)
    total = int(redis_client.get(ks.lanes_total) or 0)
    assert total == sum(sizes.values()), (total, sizes)
    return total


def test_the_pending_total_counts_every_lane_through_every_script(conn, queue, redis_client):
    jobs, acts, ks = Jobs(conn), Actions(conn), Keyspace(queue)
    lanes = ("", "chat-1", "chat-2")

    def total():
        counted = _lanes_are_counted_true(redis_client, ks, lanes)
        (summary,) = [q for q in dashboard.overview(conn, [queue]).queues if q.name == queue]
        assert summary.pending == counted
        return counted

    ids = {}
    for name, group, priority in (("a", None, 0), ("b", None, 3), ("c", None, 0),
                                  ("x", "chat-1", 5), ("y", "chat-1", -3), ("z", "chat-2", 0)):
        ids[name] = BrandedId.generate()
        jobs.enqueue(queue, ids[name], payload(0), group=group, priority=priority)
    assert jobs.enqueue(queue, ids["x"], payload(0), group="chat-1") == "duplicate"
    assert total() == 6
    later = BrandedId.generate()
    jobs.enqueue_in(queue, later, payload(0), 600_000, group="chat-2", priority=9)
    assert total() == 6                                   # scheduled: in no lane yet
    claims, _ = jobs.claim_many(queue, "w", 60_000, 3)    # one from each lane, in turn
    assert sorted(c.group or "" for c in claims) == sorted(lanes)
    assert total() == 3
    done, failing, stopping = claims
    jobs.ack(queue, done.job_id, done.token)
    jobs.retry(queue, failing.job_id, failing.token, 0, "boom")
    assert total() == 3
    assert jobs.promote(queue) == 1
    assert total() == 4
    jobs.release(queue, stopping.job_id, stopping.token)
    assert total() == 5
    pending = [j for j in ids.values() if jobs.get(queue, j).state == "pending"]
    grouped = next(j for j in pending if jobs.get(queue, j).group)
    assert jobs.cancel(queue, grouped) == "cancelled"
    assert total() == 4
    ungrouped = next(j for j in pending if not jobs.get(queue, j).group)
    assert acts.delete(queue, ungrouped) == "deleted"
    assert total() == 3
    expiring = jobs.claim(queue, "w", 1)
    assert total() == 2
    time.sleep(0.01)
    assert jobs.reap(queue, max_stalls=5) == 1            # back to its lane
    assert total() == 3
    dying = jobs.claim(queue, "w", 60_000)
    jobs.dead(queue, dying.job_id, dying.token, "failed", "boom")
    assert total() == 2
    assert acts.retry_dead(queue, dying.job_id) == "moved"
    assert total() == 3
    assert acts.run_now(queue, later) == "moved"
    assert total() == 4
    while jobs.claim(queue, "w", 60_000):
        pass
    assert total() == 0 and redis_client.zcard(ks.lanes) == 0


@pytest.mark.parametrize("rate, shown", [
    ((10, 1000), "rate 10 per 1 s"), ((1, 60_000), "rate 1 per 1 min"),
    ((3, 1500), "rate 3 per 1500 ms"), ((1, 34), "rate 1 per 34 ms"),
    ((1, 90_000), "rate 1 per 1 min 30 s"), ((1, 90_061_000), "rate 1 per 90061000 ms")])
def test_a_limit_window_is_shown_exactly(rate, shown):
    from echomq_django.admin import present

    assert present.limits({"rate": rate}) == [shown]


def test_overview_counts_pending_in_every_lane_and_shows_lanes_and_limits(
        viewer, valkey_url, conn, queue):
    other = queue + "-b"
    jobs = Jobs(conn)
    for group in (None, None, "chat-1", "chat-1", "chat-2"):
        jobs.enqueue(queue, BrandedId.generate(), payload(0), group=group)
    jobs.set_limits(queue, concurrency=4, lane_concurrency=1, rate=(10, 1000),
                    lane_rate=(1, 60_000))
    jobs.enqueue(other, BrandedId.generate(), payload(0))
    with override_settings(ECHOMQ={"URL": valkey_url, "QUEUES": [queue, other]}):
        text = viewer.get(ADMIN).content.decode()
        queue_page = viewer.get(set_url(queue, "dead")).content.decode()
        other_page = viewer.get(lanes_url(other)).content.decode()
    row = re.search(rf'<tr data-queue="{queue}">(.*?)</tr>', text, re.S).group(1)
    counts = dict(re.findall(r'data-set="(\w+)"><a [^>]*>(\d+)</a>', row))
    assert counts["pending"] == "5"                       # 2 ungrouped + 3 in two lanes
    assert f'<a href="{lanes_url(queue)}" data-lanes="3">3 lanes</a>' in row
    limits = re.search(r'<div class="emq-limits" title="Limits">(.*?)</div>\s*</td>', row,
                       re.S).group(1)
    assert re.findall(r'<div class="emq-limit">([^<]*)</div>', limits) == [
        "concurrency 4", "lane concurrency 1", "rate 10 per 1 s", "lane rate 1 per 1 min"]
    row = re.search(rf'<tr data-queue="{other}">(.*?)</tr>', text, re.S).group(1)
    assert '<div class="emq-limits" title="Limits">no limits</div>' in row
    assert "data-lanes=" in row                            # its one ungrouped lane
    # Every queue page says the same above its tabs, which count every lane.
    assert re.search(r'id="emq-limits">Limits: <span class="emq-limit">concurrency 4</span> · '
                     r'<span class="emq-limit">lane concurrency 1</span> · '
                     r'<span class="emq-limit">rate 10 per 1 s</span> · '
                     r'<span class="emq-limit">lane rate 1 per 1 min</span></p>', queue_page)
    tabs = dict(re.findall(r'data-set="(\w+)"[^>]*>\w+ <span class="emq-tab-count">(\d+)</span>',
                           queue_page))
    assert tabs == {"pending": "5", "lanes": "3", "schedule": "0", "active": "0", "dead": "0",
                    "repeat": "0"}
    assert 'id="emq-limits">Limits: none</p>' in other_page


def _stamp(ms, zone):
    import datetime as dt
    from zoneinfo import ZoneInfo

    return dt.datetime.fromtimestamp(ms / 1000, ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M:%S %Z")


def test_lanes_page_lists_lanes_busiest_first_with_running_and_state(
        viewer, conn, queue, redis_client, server_time_ms):
    jobs, ks = Jobs(conn), Keyspace(queue)
    jobs.set_limits(queue, lane_concurrency=1, lane_rate=(1, 60_000))
    for group, n in (("limited", 5), ("capped", 4)):
        for _ in range(n):
            jobs.enqueue(queue, BrandedId.generate(), payload(0), group=group)
    claims, _ = jobs.claim_many(queue, "w", 60_000, 2)
    assert [c.group for c in claims] == ["limited", "capped"]
    jobs.ack(queue, claims[0].job_id, claims[0].token)
    # limited has spent its token (rate-limited); capped runs its one (at cap).
    assert jobs.claim(queue, "w", 60_000) is None
    for group, n in (("ready", 2), (None, 1)):
        for _ in range(n):
            jobs.enqueue(queue, BrandedId.generate(), payload(0), group=group)
    due = int(redis_client.zscore(ks.waiting, "limited"))
    assert 0 < due - server_time_ms() <= 60_000

    with override_settings(TIME_ZONE="Europe/Berlin"):
        text = viewer.get(lanes_url(queue)).content.decode()
    rows = re.findall(r'<tr data-lane="([^"]*)">(.*?)</tr>', text, re.S)
    assert [name for name, _ in rows] == ["limited", "capped", "ready", ""]  # busiest first

    def cell(row, col):
        return re.search(rf'data-col="{col}"[^>]*>(.*?)</td>', row, re.S).group(1).strip()

    found = {name: (re.sub(r"<[^>]+>", "", cell(row, "pending")),
                    re.sub(r"<[^>]+>", "", cell(row, "running")),
                    re.search(r'data-state="([^"]+)"', row).group(1)) for name, row in rows}
    assert found == {"limited": ("4", "0", "rate-limited"), "capped": ("3", "1", "at cap"),
                     "ready": ("2", "0", "ready"), "": ("1", "–", "ready")}
    by_name = dict(rows)
    assert f"until {_stamp(due, 'Europe/Berlin')}" in by_name["limited"]
    assert re.search(r'<div class="emq-note">in (59 s|1 min)</div>', by_name["limited"])
    assert "1 of 1 running" in by_name["capped"]
    for name, row in rows:   # each links to its lane's pending jobs
        href = set_url(queue, "pending") + (f"?lane={name}" if name else "")
        assert f'<a href="{href}">' in row, name
    assert "4 lanes with jobs waiting: 2 ready, 1 at cap, 1 rate-limited." in text
    assert 'data-set="lanes" aria-current="page">lanes <span class="emq-tab-count">4<' in text

    # A token already due: the lane rejoins the ring at the next claim.
    redis_client.zadd(ks.waiting, {"limited": server_time_ms() - 5_000})
    text = viewer.get(lanes_url(queue)).content.decode()
    row = re.search(r'<tr data-lane="limited">(.*?)</tr>', text, re.S).group(1)
    assert re.search(r"\d s ago: rejoins the ring at the next claim", row)

    # A page at a time.
    text = viewer.get(lanes_url(queue), {"per_page": 2, "page": 2}).content.decode()
    assert re.findall(r'<tr data-lane="([^"]*)">', text) == ["ready", ""]
    assert "3–4 of 4 · page 2 of 2" in text


def test_lanes_page_of_a_queue_without_lanes(viewer, conn, queue):
    Jobs(conn).enqueue_in(queue, BrandedId.generate(), payload(0), 60_000)
    text = viewer.get(lanes_url(queue)).content.decode()
    assert f"No lane of {queue} has jobs waiting." in text
    assert "0 lanes with jobs waiting" in text
    assert viewer.get(f"{ADMIN}bad%20name/lanes/").status_code == 404


def test_pending_shows_one_lane_in_claim_order_with_priority_and_group(viewer, conn, queue):
    jobs = Jobs(conn)
    ids = {}
    for name, group, priority in (("a", None, 0), ("b", None, 7), ("c", None, -2),
                                  ("x", "chat-1", 5), ("y", "chat-1", 5), ("z", "chat-1", 100)):
        ids[name] = BrandedId.generate()
        jobs.enqueue(queue, ids[name], payload(0), group=group, priority=priority)

    def shown(text):
        return [next(k for k, v in ids.items() if v == job) for job in
                re.findall(r'<tr data-job="(\w+)">', text)]

    def priorities(text):
        return re.findall(r'data-col="priority">(-?\d+)</td>', text)

    text = viewer.get(set_url(queue, "pending")).content.decode()
    assert shown(text) == ["b", "a", "c"]                 # the ungrouped lane by default
    assert priorities(text) == ["7", "0", "-2"]
    assert 'Lane <strong id="emq-lane">(ungrouped)</strong>: 3 of 6 pending.' in text
    assert 'data-set="pending" aria-current="page">pending <span class="emq-tab-count">6<' in text
    choices = re.findall(r'class="emq-lane-choice[^"]*" data-lane="([^"]*)">[^<]*'
                         r'<span class="emq-tab-count">(\d+)</span>', text)
    assert sorted(choices) == [("", "3"), ("chat-1", "3")]

    text = viewer.get(set_url(queue, "pending"), {"lane": "chat-1"}).content.decode()
    assert shown(text) == ["z", "x", "y"]                 # priority, then mint order
    assert priorities(text) == ["100", "5", "5"]
    assert 'Lane <strong id="emq-lane">chat-1</strong>: 3 of 6 pending.' in text
    assert (f'lane <a href="{set_url(queue, "pending")}?lane=chat-1">chat-1</a>'
            in re.search(rf'<tr data-job="{ids["z"]}">(.*?)</tr>', text, re.S).group(1))
    # The lane claims in the order shown.
    order = []
    while (claim := jobs.claim(queue, "w", 60_000)):
        if claim.group == "chat-1":
            order.append(claim.job_id)
    assert order == [ids["z"], ids["x"], ids["y"]]

    # The pager keeps the lane; a lane that breaks the group rule is not found.
    for _ in range(3):
        jobs.enqueue(queue, BrandedId.generate(), payload(0), group="chat-2")
    text = viewer.get(set_url(queue, "pending"), {"lane": "chat-2", "per_page": 2}).content.decode()
    assert f'href="{set_url(queue, "pending")}?lane=chat-2&amp;page=2"' in text
    assert viewer.get(set_url(queue, "pending"), {"lane": "a b"}).status_code == 404
    assert viewer.get(set_url(queue, "pending"), {"lane": "x" * 201}).status_code == 404

    # More lanes than the page offers: the busiest, and a link to the rest.
    for i in range(12):
        jobs.enqueue(queue, BrandedId.generate(), payload(0), group=f"more-{i:02d}")
    text = viewer.get(set_url(queue, "pending"), {"lane": "chat-2"}).content.decode()
    assert len(re.findall(r'class="emq-lane-choice', text)) == dashboard.LANE_CHOICES + 1
    assert f'<a href="{lanes_url(queue)}">+ 3 more lanes</a>' in text  # 13 lanes, 10 shown
    assert 'data-lane="chat-2"' in text                   # the busiest (3 jobs) first

    # The other lists show a job's lane and priority too.
    later = BrandedId.generate()
    jobs.enqueue_in(queue, later, payload(0), 600_000, group="chat-9", priority=9)
    text = viewer.get(set_url(queue, "schedule")).content.decode()
    row = re.search(rf'<tr data-job="{later}">(.*?)</tr>', text, re.S).group(1)
    assert f'lane <a href="{set_url(queue, "pending")}?lane=chat-9">chat-9</a> · priority 9' in row


def test_job_page_shows_lane_and_priority_and_finds_the_job_in_its_lane(viewer, conn, queue):
    jobs = Jobs(conn)
    grouped, plain = BrandedId.generate(), BrandedId.generate()
    jobs.enqueue(queue, grouped, payload(0), group="chat-1", priority=5)
    jobs.enqueue(queue, plain, payload(0))
    text = viewer.get(job_url(queue, grouped)).content.decode()
    assert f'in <a href="{set_url(queue, "pending")}?lane=chat-1">pending</a>' in text
    assert f'<a href="{set_url(queue, "pending")}?lane=chat-1" id="emq-job-lane">chat-1</a>' in text
    assert 'id="emq-job-priority">5<' in text
    assert dashboard.job_detail(conn, queue, grouped).sets == {"pending": -5}
    text = viewer.get(job_url(queue, plain)).content.decode()
    assert f'in <a href="{set_url(queue, "pending")}">pending</a>' in text
    assert 'id="emq-job-lane">(ungrouped)<' in text and 'id="emq-job-priority">0<' in text


# -- scale: commands per page -------------------------------------------------------


def command_calls(client) -> dict[str, int]:
    return nodes.command_stats(client)   # on a cluster, every primary's


def commands_for(client, redis_client, url) -> dict[str, int]:
    before = command_calls(redis_client)
    response = client.get(url)
    assert response.status_code == 200, url
    after = command_calls(redis_client)
    delta = {name: after[name] - before.get(name, 0) for name in after}
    delta.pop("info", None)
    if nodes.is_cluster(redis_client) and delta.get("time"):
        # On a cluster TIME goes as a one-line script (clock.time_command):
        # the server counts its EVAL and the TIME inside. Count it once, as TIME.
        delta["eval"] -= delta["time"]
    delta = {name: n for name, n in delta.items() if n}
    if url == ADMIN:
        # The overview's cost depends on how many queues and processes it
        # lists (other tests' announcements may still be live): record them.
        text = response.content.decode()
        delta["queues listed"] = text.count("<tr data-queue=")
        delta["processes listed"] = text.count("<tr data-worker=")
    return delta


def _bulk_seed(redis_client, queue, n_schedule, n_pending, now_ms):
    ks = Keyspace(queue)
    pipe = redis_client.pipeline(transaction=False)
    for i in range(n_schedule):
        job_id = f"JOBS{i:012d}"
        pipe.hset(ks.job(job_id), mapping={"state": "scheduled", "attempts": 0,
                                           "payload": payload(i), "run_at_ms": now_ms + i * 10})
        pipe.zadd(ks.schedule, {job_id: now_ms + i * 10})
    for i in range(n_pending):
        job_id = f"JOBP{i:012d}"
        pipe.hset(ks.job(job_id), mapping={"state": "pending", "attempts": 0,
                                           "payload": payload(i)})
        pipe.zadd(ks.pending, {job_id: 0})
    # The ungrouped lane's bookkeeping, as includes/lanes.lua keeps it.
    pipe.zadd(ks.lanes, {"": n_pending})
    pipe.set(ks.lanes_total, n_pending)
    pipe.zadd(ks.ring, {"": 1})
    pipe.execute()


@pytest.mark.skipif(bool(__import__("os").environ.get("ECHOMQ_TEST_URL")),
                    reason="counts commands server-wide: only on the server this suite started")
def test_commands_per_page_are_bounded_and_do_not_grow_with_the_sets(
        viewer, valkey_url, redis_client, server_time_ms):
    import uuid

    small, big = "t-" + uuid.uuid4().hex[:12], "t-" + uuid.uuid4().hex[:12]
    now = server_time_ms()
    _bulk_seed(redis_client, small, 200, 100, now)
    _bulk_seed(redis_client, big, 5_000, 2_000, now)
    found = {}
    with override_settings(ECHOMQ={"URL": valkey_url, "QUEUES": [small, big]}):
        for queue in (small, big):
            pages = {"overview": ADMIN,
                     **{s: set_url(queue, s) for s in dashboard.SETS},
                     "schedule p3": set_url(queue, "schedule") + "?page=3",
                     "lanes": lanes_url(queue),
                     "job": job_url(queue, "JOBS000000000007")}
            # The first render opens the connection and loads the scripts;
            # count the second.
            for url in pages.values():
                viewer.get(url)
            found[queue] = {name: commands_for(viewer, redis_client, url)
                            for name, url in pages.items()}
    for name in found[small]:
        if name != "overview":
            assert found[small][name] == found[big][name], name
        seen = set(found[big][name])
        assert not seen & {"keys", "scan", "smembers", "hgetall"} or name in ("job", "repeat"), (
            name, seen)
    # A list page: one pipeline (TIME, the pending total, 5 ZCARD (lanes and
    # four sets), the paused mark, the announcement, the limits, ZRANGE) and
    # one script, whose one HMGET per row (the fields, the payload's chunks,
    # last_error) the server counts too (50 rows a page).
    schedule = found[big]["schedule"]
    assert sum(schedule.values()) == 11 + 1 + dashboard.PAGE_SIZE, schedule
    assert schedule.get("zrange", 0) == 1 and schedule.get("zcard", 0) == 5
    assert schedule.get("get", 0) == 2 and schedule.get("zscore", 0) == 1
    assert schedule.get("evalsha", 0) + schedule.get("eval", 0) == 1
    # Pending adds its lane's ZCARD and the busiest lanes (one ZRANGE).
    pending = found[big]["pending"]
    assert sum(pending.values()) == 13 + 1 + dashboard.PAGE_SIZE, pending
    # The overview: TIME and two ZRANGEs, 25 commands per queue listed and
    # one HGETALL per live process.
    for queue in (small, big):
        overview = dict(found[queue]["overview"])
        queues, processes = overview.pop("queues listed"), overview.pop("processes listed")
        assert 2 <= queues <= dashboard.MAX_QUEUES
        assert sum(overview.values()) == 3 + 25 * queues + processes, overview
    assert sum(found[big]["job"].values()) <= 7


def _seed_lanes(conn, queue, n_lanes):
    """n_lanes lanes of two jobs each under lane limits, some claimed from
    (running, then at cap or out of tokens), and three ungrouped jobs;
    returns the id of a running job."""
    jobs = Jobs(conn)
    jobs.set_limits(queue, lane_concurrency=1, lane_rate=(1, 60_000))

    def fill(lanes):
        for i in lanes:
            for _ in range(2):
                jobs.enqueue(queue, BrandedId.generate(), payload(i), group=f"g{i:04d}",
                             priority=i % 5)

    fill(range(6))
    claims, _ = jobs.claim_many(queue, "w", 60_000, 6)
    jobs.ack(queue, claims[0].job_id, claims[0].token)
    # g0000 is out of tokens, g0001-g0005 run their one: nothing to claim.
    assert jobs.claim_many(queue, "w", 60_000, 6)[0] == []
    fill(range(6, n_lanes))
    for _ in range(3):
        jobs.enqueue(queue, BrandedId.generate(), payload(0))
    return claims[1].job_id


@pytest.mark.skipif(bool(__import__("os").environ.get("ECHOMQ_TEST_URL")),
                    reason="counts commands server-wide: only on the server this suite started")
def test_lane_pages_cost_the_same_commands_with_10_or_1000_lanes(
        viewer, valkey_url, conn, redis_client):
    import uuid

    small, big = "t-" + uuid.uuid4().hex[:12], "t-" + uuid.uuid4().hex[:12]
    running = {small: _seed_lanes(conn, small, 10), big: _seed_lanes(conn, big, 1000)}
    for queue in (small, big):   # lanes in every state
        ks = Keyspace(queue)
        assert redis_client.zcard(ks.ring) and redis_client.scard(ks.capped)
        assert redis_client.zcard(ks.waiting)
    assert redis_client.zcard(Keyspace(big).lanes) == 1001
    found = {}
    with override_settings(ECHOMQ={"URL": valkey_url, "QUEUES": [small, big]}):
        for queue in (small, big):
            pages = {"overview": ADMIN,
                     "lanes": lanes_url(queue),
                     "pending": set_url(queue, "pending"),
                     "pending, a lane": set_url(queue, "pending") + "?lane=g0003",
                     "job": job_url(queue, running[queue])}
            for url in pages.values():   # the first render loads the scripts
                viewer.get(url)
            found[queue] = {name: commands_for(viewer, redis_client, url)
                            for name, url in pages.items()}
    for name in found[small]:
        if name != "overview":
            assert found[small][name] == found[big][name], name
        seen = set(found[big][name])
        assert not seen & {"keys", "scan", "smembers", "hgetall", "zscan", "sscan",
                           "hscan"} or name == "job", (name, seen)
    # The lanes page: the queue's head (10), the ring, capped and waiting
    # sizes and a page of the lanes index (4); then four multi-member reads.
    lanes = found[big]["lanes"]
    assert sum(lanes.values()) == 14 + 4, lanes
    assert lanes.get("zmscore") == 2 and lanes.get("smismember") == 1
    # A grouped job's page looks it up in its lane: one ZSCORE more.
    assert sum(found[big]["job"].values()) == 8
    for queue in (small, big):
        overview = dict(found[queue]["overview"])
        queues, processes = overview.pop("queues listed"), overview.pop("processes listed")
        assert sum(overview.values()) == 3 + 25 * queues + processes, overview


# -- the scripts' contract -----------------------------------------------------------


def test_actions_pass_their_scripts_header_keys(conn, queue, monkeypatch):
    calls = []
    real_run = scripts.run

    def spy(client, name, keys, args):
        calls.append((name, list(keys), list(args)))
        return real_run(client, name, keys, args)

    monkeypatch.setattr(scripts, "run", spy)
    ks = Keyspace(queue)
    ids = seed(conn, queue)
    calls.clear()
    acts = Actions(conn)
    acts.run_now(queue, ids["schedule"])
    acts.retry_dead(queue, ids["dead"])
    acts.delete(queue, ids["pending"])
    acts.retry_all_dead(queue)
    acts.purge_dead(queue)
    dashboard.set_page(conn, queue, "pending")
    expected = {
        "admin/run_now": [ks.job(ids["schedule"]), ks.schedule, ks.pending, ks.wake],
        "admin/retry_dead": [ks.job(ids["dead"]), ks.dead, ks.pending, ks.wake],
        "admin/delete": [ks.job(ids["pending"]), ks.pending, ks.schedule, ks.dead],
        "admin/retry_all_dead": [ks.dead, ks.pending, ks.wake],
        "admin/purge_dead": [ks.dead],
        "admin/rows": [ks.pending],
    }
    assert [name for name, _, _ in calls] == list(expected)
    for name, keys, args in calls:
        src = scripts.source(name)
        assert keys == expected[name], name
        assert [label if label != "job" else "job" for label in src.keys] == [
            "job" if k.startswith(ks.base + "job:") else k.removeprefix(ks.base)
            for k in keys], name
        assert len(args) == len(src.argv), name
        if "base" in src.argv:
            assert args[src.argv.index("base")] == ks.base, name
        if "wake_cap" in src.argv:
            assert args[src.argv.index("wake_cap")] == WAKE_CAP, name


@pytest.mark.parametrize("name", ["admin/rows", "admin/retry_all_dead", "admin/purge_dead"])
def test_admin_scripts_refuse_a_base_that_is_not_the_queue_root(conn, queue, redis_client,
                                                                server_time_ms, name):
    ks = Keyspace(queue)
    _dead_letters(redis_client, queue, 3, server_time_ms() - 1000)
    before = snapshot(redis_client, queue)
    cases = {
        "admin/rows": ([ks.pending], lambda base: [base, 100, json.dumps(["JOB1"]), '["state"]']),
        "admin/retry_all_dead": ([ks.dead, ks.pending, ks.wake],
                                 lambda base: [base, 1000, "", WAKE_CAP]),
        "admin/purge_dead": ([ks.dead], lambda base: [base, 1000, ""]),
    }
    keys, build = cases[name]
    for base in ("", "emq:", f"emq:{{{queue}", f"emq:{{{queue}}}:p", "emq:{other}:"):
        with pytest.raises(ValueError, match="base root"):
            scripts.run(conn, name, keys, build(base))
    assert snapshot(redis_client, queue) == before


def test_rows_are_cut_short_and_missing_rows_are_marked(conn, queue, redis_client):
    jobs = Jobs(conn)
    big = BrandedId.generate()
    jobs.enqueue(queue, big, json.dumps({"job": "a.b.c", "args": ["x" * 100_000], "kwargs": {}}))
    redis_client.zadd(Keyspace(queue).pending, {"JOBgone": 0})
    page = dashboard.set_page(conn, queue, "pending")
    by_id = {r.job_id: r for r in page.rows}
    assert by_id[big].job == "a.b.c" and len(by_id[big].payload) == dashboard.CUT_BYTES
    assert by_id["JOBgone"].exists is False and by_id["JOBgone"].state is None
    text_rows = scripts.run(conn, "admin/rows", [Keyspace(queue).pending],
                            [Keyspace(queue).base, 10, json.dumps([big]), '["payload","nope"]'])
    assert text_rows == [['{"job": "a', None, "a.b.c", None]]


def snapshot(client, queue):
    return state.snapshot(client, state.queue_pattern(queue), with_ttl=True)


@pytest.mark.parametrize("char", ["é", "€", "😀"], ids=["2-byte", "3-byte", "4-byte"])
def test_list_pages_cut_multibyte_text_on_a_character_boundary(viewer, conn, queue,
                                                              redis_client, char):
    # ``char`` ends one byte after the cut: the cut falls inside it and would
    # keep all of it but its last byte.
    ks = Keyspace(queue)
    pad = dashboard.CUT_BYTES - len(char.encode()) + 1
    text = "a" * pad + char * 50
    pending, dead = BrandedId.generate(), BrandedId.generate()
    head = '{"job": "a.b", "args": ["'
    Jobs(conn).enqueue(queue, pending, head + text[len(head):] + '"], "kwargs": {}}')
    redis_client.hset(ks.job(dead), mapping={"state": "dead", "attempts": 1, "reason": "failed",
                                             "payload": payload(1), "last_error": text})
    redis_client.zadd(ks.dead, {dead: 1})
    page = dashboard.set_page(conn, queue, "pending")
    (row,) = page.rows
    assert len(row.payload.encode()) <= dashboard.CUT_BYTES
    assert row.payload.endswith("a" * 10)  # the partial character is dropped whole
    (row,) = dashboard.set_page(conn, queue, "dead").rows
    assert row.last_error == "a" * pad
    for set_name in ("pending", "dead"):
        response = viewer.get(set_url(queue, set_name))
        assert response.status_code == 200, set_name
        assert "a" * 50 in response.content.decode(), set_name  # the args, the error
