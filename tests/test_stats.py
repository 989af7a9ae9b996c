"""``./manage.py echomq_stats``: one run's table holds every count of a queue
filled here, its latency and lanes, and the live workers."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from echomq_django.protocol.keyspace import Keyspace
from echomq_django.protocol.presence import Presence
from tests.testapp import jobs as testjobs


def test_one_run_prints_the_queue_s_counts_lanes_and_workers(conn, redis_client, queue,
                                                             server_time_ms):
    fn = testjobs.choose.using(queue=queue)
    for i in range(3):
        fn.using(group=f"chat-{i}").enqueue("k", "done")
    for _ in range(2):
        fn.enqueue_in(3_600_000, "k", "done")
    ks = Keyspace(queue)
    redis_client.zadd(ks.dead, {"JOBDEAD1": 1})
    redis_client.sadd(ks.capped, "chat-0")
    redis_client.hset(ks.job(fn.using(group="chat-9").enqueue("k", "done").job_id),
                      "enqueued_at_ms", server_time_ms() - 75_000)
    worker = f"host-{queue}:4242"
    Presence(conn).announce(worker, {"host": "host-x", "pid": 4242, "queues": queue,
                                     "concurrency": 8, "busy": 3,
                                     "started_at_ms": server_time_ms() - 30_000},
                            [queue], 60_000)
    out = StringIO()
    try:
        call_command("echomq_stats", "--queue", queue, stdout=out)
    finally:
        Presence(conn).retire(worker)
    text = out.getvalue()
    row = next(line for line in text.splitlines() if queue in line and "│" in line
               and "host" not in line)
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert cells[:6] == [queue, "4", "2", "0", "1", "0"]
    assert cells[6].endswith(" s") and 75 <= float(cells[6].split()[0]) < 78   # latency
    assert cells[8:] == ["4", "1", "0"]                                    # lanes, cap, rate
    assert worker in text and "3/8" in text


def test_a_bad_queue_or_watch_is_a_usage_error():
    with pytest.raises(CommandError):
        call_command("echomq_stats", "--queue", "a b")
    with pytest.raises(CommandError):
        call_command("echomq_stats", "--watch", "0.1")


def test_a_cluster_no_node_of_which_answers_is_a_command_error(queue):
    import socket

    from django.test import override_settings

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with override_settings(ECHOMQ={"URL": f"redis+cluster://127.0.0.1:{port}"}):
        with pytest.raises(CommandError, match="cannot read the EchoMQ server"):
            call_command("echomq_stats", stdout=StringIO())
