"""Every script checks every declared key (issue 9, item 2): a key that is not
the queue's key its header names is refused with EMQKEY before anything is
written (lua/includes/base.lua, check_keys; docs/protocol.md, "Error codes")."""

import pytest
import redis
from redis.exceptions import RedisClusterException

from echomq_django import Jobs
from echomq_django.protocol import scripts
from echomq_django.protocol.ids import BrandedId
from echomq_django.protocol.keyspace import WAKE_CAP, Keyspace
from tests.nodes import CROSS_SLOT, crosses_slots
from tests.state import queue_pattern, snapshot
from tests.test_scripts import SCRIPTS, _repeat_calls, _writing_calls

#: The shared root of the presence keys (keyspace.GLOBAL_BASE).
SHARED = "emq:{~}:"


def _more_calls(conn, redis_client, queue):
    """The scripts the argument tests leave out, each as a call that would
    write (or, for the read-only ones, answer)."""
    ks = Keyspace(queue)
    jobs = Jobs(conn)
    doomed = BrandedId.generate()
    jobs.enqueue(queue, doomed, "{}")
    worker = "w-" + queue
    redis_client.zadd(SHARED + "workers", {worker: 1})
    redis_client.zadd(ks.repeat, {"gone": 5})
    return {
        "queues/pause": ([ks.paused], []),
        "queues/horizon": ([ks.schedule, ks.active, ks.repeat, ks.synced, ks.beat_at, ks.wake,
                            ks.paused], [0, 0]),
        "queues/set_limits": ([ks.limits], [3, "", "", "", "", ""]),
        "queues/set_archive": ([ks.limits], [1000]),
        "repeat/due": ([ks.repeat], [10]),
        "repeat/mark_synced": ([ks.synced], []),
        "repeat/unregister": ([ks.repeat, ks.repeat_record("gone")], ["gone"]),
        "presence/retire": ([SHARED + "workers", SHARED + "worker:" + worker], [worker]),
        "presence/announce": ([SHARED + "workers", SHARED + "worker:" + worker,
                               SHARED + "queues"], [worker, 60_000, "{}", "[]"]),
        "admin/rows": ([ks.pending], [ks.base, 100, f'["{doomed}"]', '["state"]']),
        "admin/search": ([ks.pending], [ks.base, f'["{doomed}"]', "", "", "", 10]),
        "admin/delete": ([ks.job(doomed), ks.pending, ks.schedule, ks.dead], [doomed]),
        "admin/gauges": ([ks.pending, ks.schedule, ks.active, ks.dead, ks.repeat, ks.lanes,
                          ks.lanes_total, ks.ring, ks.capped, ks.waiting], [ks.base, 100, 8]),
    }


#: Scripts that only read: a refused call is told by its answer alone.
READ_ONLY = {"queues/horizon", "repeat/due", "admin/rows", "admin/gauges", "admin/search"}


def _wrong_keys(key: str, alone: bool) -> list[str]:
    """Keys a careless or hostile caller might pass instead of ``key``: another
    key of the same root, no root at all, and the same key under another root
    (unless the key is ``alone``: then it is that other queue's own key)."""
    root = key[: key.index("}:") + 2]
    suffix = key[len(root):]
    other = "wake" if suffix == "pending" else "pending"
    wrongs = [root + other, suffix, "emq:" + suffix, root + suffix + "x"]
    return wrongs if alone else [*wrongs, "emq:{elsewhere}:" + suffix]


def _raw_error(conn, name, keys, args) -> str:
    """The server's error reply, code included (scripts.run strips the code)."""
    with pytest.raises(redis.ResponseError) as info:
        scripts._script(conn, name)(keys=list(keys), args=list(args))
    return str(info.value)


@pytest.mark.parametrize("name", [n for n in SCRIPTS if n != "limits/take"])
def test_every_declared_key_must_be_the_queue_key_its_header_names(
        conn, redis_client, queue, server_time_ms, name):
    # limits/take's one key is a limiter's; tests/test_limits.py checks it.
    calls, _ = _writing_calls(conn, redis_client, queue)
    calls.update(_repeat_calls(conn, redis_client, queue, server_time_ms))
    calls.update(_more_calls(conn, redis_client, queue))
    keys, args = calls[name]
    src = scripts.source(name)
    assert len(keys) == len(src.keys), name
    if name == "repeat/drop_member":
        redis_client.zadd(Keyspace(queue).repeat, {"zz": 5})   # a member without a record
    alone = len(keys) == 1 and "base" not in src.argv

    worker = "w-" + queue

    def state():
        return {**snapshot(redis_client, queue_pattern(queue), queue_pattern(queue + "-p"),
                           queue_pattern("elsewhere")),
                "worker": snapshot(redis_client, SHARED + "worker:" + worker),
                "workers": redis_client.zscore(SHARED + "workers", worker),
                "queues": redis_client.zrange(SHARED + "queues", 0, -1)}

    before = state()
    for i, key in enumerate(keys):
        for wrong in _wrong_keys(key, alone):
            broken = [*keys[:i], wrong, *keys[i + 1:]]
            if crosses_slots(conn, broken):
                # A cluster refuses keys of several slots before any script runs.
                with pytest.raises((RedisClusterException, redis.ResponseError), match=CROSS_SLOT):
                    scripts.run(conn, name, broken, args)
            else:
                reply = _raw_error(conn, name, broken, args)
                assert reply.startswith("EMQKEY "), (name, i, wrong, reply)
                with pytest.raises(ValueError, match=r"^(key .* (must be|is not a queue key)"
                                                     r"|base root )"):
                    scripts.run(conn, name, broken, args)
            assert state() == before, (name, i, wrong)
    # The call as built is taken, so each refusal above was about its key.
    scripts.run(conn, name, keys, args)
    if name not in READ_ONLY:
        assert state() != before, name


def test_the_reviewer_s_cases_write_nothing(conn, redis_client, queue):
    """enqueue with the pending key as its wake key, resume with the pending
    key in place of paused: each used to write part of its work."""
    ks = Keyspace(queue)
    job_id = BrandedId.generate()
    with pytest.raises(ValueError, match=rf"key emq:\{{{queue}\}}:pending must be "
                                         rf"emq:\{{{queue}\}}:wake"):
        scripts.run(conn, "jobs/enqueue", [ks.job(job_id), ks.pending, ks.pending],
                    [job_id, "{}", WAKE_CAP, "", 0])
    assert snapshot(redis_client, queue_pattern(queue)) == {}
    Jobs(conn).enqueue(queue, BrandedId.generate(), "{}")
    redis_client.set(ks.paused, 1)
    before = snapshot(redis_client, queue_pattern(queue))
    with pytest.raises(ValueError, match="must be"):
        scripts.run(conn, "queues/resume", [ks.pending, ks.pending, ks.wake], [WAKE_CAP])
    assert snapshot(redis_client, queue_pattern(queue)) == before


def test_every_caller_passes_keys_the_scripts_take(conn, queue):
    """The Python surfaces build their keys in keyspace.py; every one of them
    is accepted (the whole suite runs them; this is the short list)."""
    from echomq_django import Queues, RateLimiter
    from echomq_django.admin.actions import Actions
    from echomq_django.protocol.presence import Presence
    from echomq_django.repeat import Repeat

    jobs, queues, acts, rep = Jobs(conn), Queues(conn), Actions(conn), Repeat(conn)
    job_id = BrandedId.generate()
    assert jobs.enqueue(queue, job_id, "{}", group="g", priority=3) == "enqueued"
    assert queues.pause(queue) and queues.resume(queue)
    queues.set_limits(queue, concurrency=5)
    claim = jobs.claim(queue, "w", 60_000)
    assert jobs.progress(queue, claim.job_id, claim.token, 10) is False
    assert jobs.save_metadata(queue, claim.job_id, claim.token, {"k": 1}) is False
    jobs.extend(queue, claim.job_id, claim.token, 60_000)
    assert jobs.dead(queue, claim.job_id, claim.token, "failed") == "dead"
    assert acts.retry_dead(queue, job_id) == "moved"
    assert jobs.cancel(queue, job_id) == "cancelled"
    assert acts.delete(queue, job_id) == "deleted"
    assert rep.register(queue, "tick", every_ms=60_000, tz="UTC", template={}) == "registered"
    assert rep.run_now(queue, "tick").startswith("JOB")
    assert rep.pump(queue) == 0 and rep.remove(queue, "tick")
    jobs.horizon(queue)
    Presence(conn).announce("w-" + queue, {"host": "h"}, [queue], ttl_ms=1000)
    Presence(conn).retire("w-" + queue)
    assert RateLimiter(conn).take("k-" + queue, 1, 1000) == 0
