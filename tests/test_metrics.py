"""Prometheus metrics (docs/observability.md): the view's numbers, parsed with
prometheus-client's own parser, match the sets of a queue filled here; the
queue latency reads the fronts of every lane and priority level; the view
lets in a bearer token or the view permission only; a runechomq process's
own endpoint counts the outcomes of a real run."""

from __future__ import annotations

import socket
import time
import urllib.request

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client, override_settings
from prometheus_client.parser import text_string_to_metric_families

from echomq_django import Jobs
from echomq_django.admin.reads.gauges import gauges
from echomq_django.protocol.keyspace import Keyspace
from tests.procs import runechomq, stop, wait_for
from tests.testapp import jobs as testjobs

TOKEN = "t" * 24


def _scrape(client: Client, **headers) -> dict[tuple[str, str], float]:
    response = client.get("/echomq/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for s in family.samples:
            samples[(s.name, s.labels.get("queue", ""))] = s.value
    return samples


def _settings(settings, **extra):
    return override_settings(ECHOMQ={**settings.ECHOMQ, **extra})


def _set_ready_since(redis_client, queue, job_id, field, ms):
    redis_client.hset(Keyspace(queue).job(job_id), field, ms)


def test_the_view_s_numbers_match_the_sets(settings, conn, redis_client, queue,
                                           server_time_ms):
    fn = testjobs.choose.using(queue=queue)
    ks = Keyspace(queue)
    pending = [fn.enqueue("k", "done") for _ in range(3)]
    grouped = [fn.using(group=f"chat-{i}").enqueue("k", "done") for i in range(2)]
    for _ in range(4):
        fn.enqueue_in(3_600_000, "k", "done")
    jobs = Jobs(conn)
    claim = jobs.claim(queue, "w", 60_000)            # one active: the first ungrouped job
    assert claim.job_id == pending[0].job_id
    overdue_ms = server_time_ms() - 5_000
    redis_client.zadd(ks.schedule, {"JOBOVERDUE": overdue_ms})   # due 5 s ago, not promoted
    redis_client.zadd(ks.dead, {"JOBDEAD1": 1, "JOBDEAD2": 2})
    redis_client.sadd(ks.capped, "chat-0")
    redis_client.zadd(ks.waiting, {"chat-1": server_time_ms() + 1000})
    # The oldest front: the ungrouped lane's first job waited 42 s.
    _set_ready_since(redis_client, queue, pending[1].job_id, "enqueued_at_ms",
                     server_time_ms() - 42_000)
    with _settings(settings, QUEUES=[queue], METRICS_TOKEN=TOKEN):
        samples = _scrape(Client(), HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    expected = {"echomq_queue_pending_jobs": 4, "echomq_queue_scheduled_jobs": 5,
                "echomq_queue_active_jobs": 1, "echomq_queue_dead_jobs": 2,
                "echomq_queue_repeat_schedules": 0, "echomq_queue_lanes": 3,
                "echomq_queue_lanes_at_cap": 1, "echomq_queue_lanes_rate_limited": 1}
    got = {name: samples[(name, queue)] for name in expected}
    assert got == expected
    # The ZCARDs and the counter say the same.
    assert redis_client.zcard(ks.schedule) == 5 and redis_client.zcard(ks.active) == 1
    assert int(redis_client.get(ks.lanes_total)) == 4
    assert 42 <= samples[("echomq_queue_latency_seconds", queue)] < 44
    assert 5 <= samples[("echomq_queue_schedule_lag_seconds", queue)] < 7
    assert samples[("echomq_workers", "")] >= 0
    assert len(grouped) == 2


def test_latency_reads_every_lane_and_priority_level(conn, redis_client, queue, server_time_ms):
    fn = testjobs.choose.using(queue=queue)
    now = server_time_ms()
    # Lane chat-a: a high-priority job first in line, a low-priority one
    # behind it that has waited longest (the head alone would miss it).
    first = fn.using(group="chat-a", priority=10).enqueue("k", "done")
    behind = fn.using(group="chat-a", priority=-5).enqueue("k", "done")
    other = fn.using(group="chat-b").enqueue("k", "done")
    _set_ready_since(redis_client, queue, first.job_id, "enqueued_at_ms", now - 1_000)
    _set_ready_since(redis_client, queue, behind.job_id, "enqueued_at_ms", now - 90_000)
    _set_ready_since(redis_client, queue, other.job_id, "enqueued_at_ms", now - 30_000)
    (g,) = gauges(conn, [], only=[queue]).queues
    assert 90 <= g.latency_s < 92 and g.fronts_read == 3 and g.lanes_read == 2
    # A retried job counts from when it fell due, not from its admission.
    _set_ready_since(redis_client, queue, behind.job_id, "run_at_ms", now - 2_000)
    (g,) = gauges(conn, [], only=[queue]).queues
    assert 30 <= g.latency_s < 32
    # One level read per lane: chat-a's second level is not looked at.
    (g,) = gauges(conn, [], only=[queue], max_levels=1).queues
    assert g.fronts_read == 2
    # Nothing pending: 0.
    assert gauges(conn, [], only=[queue + "-empty"]).queues[0].latency_s == 0.0


def test_the_metronome_s_latency_sample_is_the_gauges_latency_once_a_minute(
        conn, redis_client, queue, server_time_ms):
    fn = testjobs.choose.using(queue=queue)
    ks = Keyspace(queue)
    jobs = Jobs(conn)
    now = server_time_ms()
    first = fn.using(group="chat-a", priority=10).enqueue("k", "done")
    behind = fn.using(group="chat-a", priority=-5).enqueue("k", "done")
    _set_ready_since(redis_client, queue, first.job_id, "enqueued_at_ms", now - 1_000)
    _set_ready_since(redis_client, queue, behind.job_id, "enqueued_at_ms", now - 90_000)
    latency = jobs.sample_latency(queue)
    (g,) = gauges(conn, [], only=[queue]).queues
    assert 90_000 <= latency <= g.latency_s * 1000 < 92_000
    (member, minute), = redis_client.zrange(ks.latency, 0, -1, withscores=True)
    assert member == f"{int(minute)}:{latency}"
    assert 0 < redis_client.pttl(ks.latency) <= 2 * 3_600_000
    # A second call in the same minute writes nothing (several metronomes).
    if server_time_ms() // 60_000 == int(minute):
        assert jobs.sample_latency(queue) is None
        assert redis_client.zcard(ks.latency) == 1
    # Only the last 60 minutes are kept: older samples are dropped.
    redis_client.zadd(ks.latency, {f"{int(minute) - m}:5": int(minute) - m
                                   for m in range(1, 80)})
    redis_client.zrem(ks.latency, member)
    jobs.sample_latency(queue)
    scores = [int(s) for _, s in redis_client.zrange(ks.latency, 0, -1, withscores=True)]
    now_minute = server_time_ms() // 60_000
    assert len(scores) == 60 and scores[0] == now_minute - 59 and scores[-1] == now_minute
    # Nothing pending: 0.
    assert jobs.sample_latency(queue + "-empty") == 0


def test_a_dead_job_counts_failed_and_dead_a_retry_failed_only(conn, redis_client, queue,
                                                                 server_time_ms):
    ks = Keyspace(queue)
    jobs = Jobs(conn)
    fn = testjobs.choose.using(queue=queue)
    fn.enqueue("k", "done")
    fn.enqueue("k", "done")
    claim = jobs.claim(queue, "w", 60_000)
    jobs.retry(queue, claim.job_id, claim.token, 3_600_000, "boom")
    claim = jobs.claim(queue, "w", 60_000)
    minute = server_time_ms() // 60_000
    jobs.dead(queue, claim.job_id, claim.token, "failed", "boom")

    def count(kind):
        return sum(int(redis_client.get(ks.stats(kind, m)) or 0) for m in (minute, minute + 1))

    assert (count("failed"), count("dead"), count("done")) == (2, 1, 0)


@pytest.mark.django_db
def test_the_view_lets_in_a_token_or_the_view_permission_only(settings, queue):
    url = "/echomq/metrics"
    with _settings(settings, QUEUES=[queue], METRICS_TOKEN=TOKEN):
        anonymous = Client().get(url)
        assert anonymous.status_code == 401 and "Bearer" in anonymous["WWW-Authenticate"]
        assert Client().get(url, HTTP_AUTHORIZATION="Bearer " + "x" * 24).status_code == 403
        user = User.objects.create_user("ops", password="pw", is_staff=True)
        client = Client()
        client.force_login(user)
        assert client.get(url).status_code == 403
        user.user_permissions.add(Permission.objects.get(codename="view_queue"))
        client.force_login(User.objects.get(pk=user.pk))
        assert client.get(url).status_code == 200
        assert client.post(url).status_code == 405
    with _settings(settings, QUEUES=[queue]):                  # no token set: none matches
        assert Client().get(url, HTTP_AUTHORIZATION="Bearer " + TOKEN).status_code == 403


def test_a_short_or_wrong_token_fails_the_check():
    from echomq_django.conf import validate

    assert [p[0] for p in validate({"METRICS_TOKEN": "short"})] == ["echomq.E017"]
    assert [p[0] for p in validate({"METRICS_TOKEN": 12345})] == ["echomq.E017"]
    assert validate({"METRICS_TOKEN": TOKEN}) == []


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _worker_samples(port: int) -> dict:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    samples = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            if s.name.startswith("echomq_"):
                key = (s.name, s.labels.get("function"), s.labels.get("outcome"),
                       s.labels.get("le"))
                samples[key] = s.value
    return samples


@pytest.mark.slow
def test_runechomq_serves_its_outcome_counters(redis_client, queue, worker_procs):
    fn = testjobs.choose.using(queue=queue)
    key = queue + ":runs"
    for _ in range(3):
        fn.enqueue(key, "done")
    fn.enqueue(key, "discard")
    fn.enqueue(key, "snooze_return", 3_600_000)
    port = _free_port()
    proc = runechomq(queue, "--metrics-port", str(port), "--metrics-addr", "127.0.0.1")
    worker_procs.append(proc)
    path = "tests.testapp.jobs.choose"

    def counted():
        # All five ended (the handler threads run them at once: the snooze
        # may be counted before the discard).
        try:
            s = _worker_samples(port)
        except OSError:
            return None
        return s if s.get(("echomq_job_duration_seconds_count", path, None, None)) == 5 \
            else None

    samples = wait_for(counted, timeout=30)
    assert samples[("echomq_jobs_total", path, "snooze", None)] == 1
    assert samples[("echomq_jobs_total", path, "done", None)] == 3
    assert samples[("echomq_jobs_total", path, "dead", None)] == 1
    assert samples[("echomq_job_duration_seconds_count", path, None, None)] == 5
    assert samples[("echomq_job_duration_seconds_bucket", path, None, "+Inf")] == 5
    assert stop(proc)[0] == 0


def test_a_taken_metrics_port_or_a_bad_address_is_a_usage_error(queue):
    """Checked before anything starts: one error naming the option, exit 2,
    not a consumer that fails and is restarted for ever."""
    import socket

    from tests.procs import runechomq, stop

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        for args, words in [(["--metrics-port", str(taken), "--metrics-addr", "127.0.0.1"],
                             "--metrics-port"),
                            (["--metrics-port", str(taken - 1), "--metrics-addr", "127.0.0.1",
                              "--processes", "2"], "--metrics-port"),
                            (["--metrics-port", "18099", "--metrics-addr", "no such host."],
                             "--metrics-addr")]:
            code, out = stop(runechomq(queue, *args), sig=0, timeout=30)
            assert code == 2 and words in out, out


@pytest.mark.parametrize("down", ["one server", "a cluster"])
def test_a_server_that_does_not_answer_is_503_not_500(queue, start_valkey, down):
    if down == "one server":
        url, proc = start_valkey()
        proc.kill()
        proc.wait()
    else:  # no node answers: redis-py's RedisClusterException, not a RedisError
        url = f"redis+cluster://127.0.0.1:{_free_port()},127.0.0.1:{_free_port()}"
    with override_settings(ECHOMQ={"URL": url, "QUEUES": [queue], "METRICS_TOKEN": TOKEN}):
        response = Client().get("/echomq/metrics", HTTP_AUTHORIZATION="Bearer " + TOKEN)
    assert response.status_code == 503
    assert response.content.decode().startswith("the EchoMQ server could not be read")
