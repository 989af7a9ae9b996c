"""Faults are input (issue 9): a server that forgets, drops connections, fills
up or goes away, and handler code that tries to take its thread down.

Each test that breaks a server does it to a throwaway one (the ``start_valkey``
fixture), never to the session's shared server.
"""

from __future__ import annotations

import subprocess
import threading
import time

import pytest
import redis

from echomq_django import Jobs, StaleTokenError
from echomq_django.protocol.ids import BrandedId
from echomq_django.protocol.keyspace import Keyspace
from tests.conftest import start_valkey_server, stop_valkey_server
from tests.nodes import on_cluster
from tests.procs import kill_all, killing_connections, runechomq, state_of, stop, wait_for
from tests.testapp import jobs as testjobs

PAYLOAD = '{"job": "tests.testapp.jobs.add", "args": [1, 2], "kwargs": {}}'


def _enqueue(jobs, queue, n=1):
    ids = [BrandedId.generate() for _ in range(n)]
    for job_id in ids:
        jobs.enqueue(queue, job_id, PAYLOAD)
    return ids


# -- 1. fencing tokens never repeat, whatever the server forgets -------------------


def test_a_server_restarted_from_an_older_snapshot_never_repeats_a_token(tmp_path, queue):
    url, proc = start_valkey_server(tmp_path)
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    client = redis.Redis.from_url(url)
    jobs = Jobs(client)
    try:
        _enqueue(jobs, queue, 2)
        first = jobs.claim(queue, "h1", 600_000)
        client.save()                       # the snapshot the server comes back to
        second = jobs.claim(queue, "h2", 600_000)
        proc.kill()
        proc.wait()
        url2, proc = start_valkey_server(tmp_path, port=port)
        assert url2 == url
        assert client.hget(Keyspace(queue).job(second.job_id), "state") == b"pending"
        # The second claim was lost with the data; the same job is claimed again.
        third = jobs.claim(queue, "h3", 600_000)
        assert third.job_id == second.job_id
        assert third.token != second.token
        # The old holder of that job is fenced out; the new one is not.
        with pytest.raises(StaleTokenError):
            jobs.ack(queue, second.job_id, second.token, "zombie")
        assert jobs.ack(queue, third.job_id, third.token, "heir") == "done"
        assert jobs.get(queue, third.job_id).result_value == "heir"
        assert jobs.ack(queue, first.job_id, first.token) == "done"
    finally:
        client.close()
        stop_valkey_server(proc)


# -- 2. lost replies, dropped connections, a full server ------------------------------


def test_a_claim_repeated_with_its_token_answers_the_same_lease(conn, redis_client, queue):
    # What a client's retry after a lost reply does: the same call again.
    jobs = Jobs(conn)
    first, second = _enqueue(jobs, queue, 2)
    claim = jobs.claim(queue, "w", 600_000, token="tok-1")
    again = jobs.claim(queue, "w", 600_000, token="tok-1")
    assert (again.job_id, again.token, again.attempts) == (first, "tok-1.1", 1)
    assert again.lease_deadline_ms == claim.lease_deadline_ms
    ks = Keyspace(queue)
    assert redis_client.zrange(ks.pending, 0, -1) == [second]    # not popped
    assert redis_client.hget(ks.job(first), "attempts") == "1"
    # Once the lease is over the token claims nothing more of that job.
    assert jobs.ack(queue, first, "tok-1.1") == "done"
    assert redis_client.hget(ks.claims, "tok-1.1") is None


@pytest.mark.parametrize("finish", ["retry", "snooze", "dead", "release"])
def test_every_finish_repeated_by_its_token_answers_the_same(conn, redis_client, queue, finish):
    jobs = Jobs(conn)
    _enqueue(jobs, queue)
    claim = jobs.claim(queue, "w", 600_000)
    call = {
        "retry": lambda: jobs.retry(queue, claim.job_id, claim.token, 60_000, "boom"),
        "snooze": lambda: jobs.snooze(queue, claim.job_id, claim.token, 60_000),
        "dead": lambda: jobs.dead(queue, claim.job_id, claim.token, "failed", "boom"),
        "release": lambda: jobs.release(queue, claim.job_id, claim.token),
    }[finish]
    answer = call()
    row = redis_client.hgetall(Keyspace(queue).job(claim.job_id))
    assert call() == answer
    assert redis_client.hgetall(Keyspace(queue).job(claim.job_id)) == row
    # Another finish by the spent token is refused.
    with pytest.raises(StaleTokenError):
        jobs.ack(queue, claim.job_id, claim.token)


def _tolerant(predicate):
    """``predicate`` for wait_for while connections are being killed: a
    dropped connection of the observer's own means "not yet"."""
    def check():
        try:
            return predicate()
        except redis.ConnectionError:
            return False
    return check


def _killer(url, stop_event, every_s):
    client = redis.Redis.from_url(url)
    kills = 0
    while not stop_event.wait(every_s):
        try:
            client.client_kill_filter(_type="normal", skipme=True)
            kills += 1
        except redis.RedisError:
            pass
    client.close()
    return kills


@pytest.mark.slow
def test_client_kill_every_50_ms_loses_fails_and_repeats_nothing(tmp_path, queue, worker_procs):
    url, proc = start_valkey_server(tmp_path)
    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        jobs = Jobs(client)
        handles = [BrandedId.generate() for _ in range(400)]
        for job_id in handles:
            jobs.enqueue(queue, job_id, '{"job": "tests.testapp.jobs.tally", '
                                        f'"args": ["{queue}:runs"], "kwargs": {{}}}}')
        stop_event = threading.Event()
        killer = threading.Thread(target=_killer, args=(url, stop_event, 0.05), daemon=True)
        worker = runechomq(queue, "--concurrency", "4", url=url)
        worker_procs.append(worker)
        killer.start()
        try:
            wait_for(_tolerant(lambda: client.scard(f"{queue}:runs") == len(handles)),
                     timeout=60)
        except AssertionError:
            # Say where it stood: the sets and the worker's own log.
            stop_event.set()
            ks = Keyspace(queue)
            where = _tolerant(lambda: {"ran": client.scard(f"{queue}:runs"),
                                       "pending": client.zcard(ks.pending),
                                       "active": client.zcard(ks.active),
                                       "schedule": client.zcard(ks.schedule),
                                       "dead": client.zcard(ks.dead)})()
            raise AssertionError(f"not every job ran within 60 s: {where}\n"
                                 f"{kill_all(worker)[-4000:]}") from None
        finally:
            stop_event.set()
            killer.join()
        wait_for(lambda: all(state_of(client, queue, j) == "done" for j in handles), timeout=30)
        code, out = stop(worker)
        assert code == 0, out
        runs = testjobs.tally_runs(client, f"{queue}:runs")
        assert sorted(runs) == sorted(handles)                      # none lost
        # None run twice; else say how each repeat came about (its row's errors).
        repeated = [j for j, n in runs.items() if n != 1]
        assert repeated == [], "\n".join(
            f"{j}: {client.hgetall(Keyspace(queue).job(j))}" for j in repeated)
        assert client.zcard(Keyspace(queue).dead) == 0              # none falsely failed
        assert "Traceback" not in out, out[-3000:]
    finally:
        client.close()
        stop_valkey_server(proc)


@pytest.mark.slow
def test_a_full_server_fails_and_repeats_no_job(tmp_path, queue, worker_procs):
    # Every script on a job's path runs on a full server: promote, claim and the
    # finishes free memory at their first write, and the lease renewal is
    # allow-oom (issue 9, item 6; tests/test_oom_lease.py). Before that, the
    # renewal was refused and repeated, and the worker logged an outage.
    url, proc = start_valkey_server(tmp_path)
    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        jobs = Jobs(client)
        worker = runechomq(queue, "--concurrency", "4", "--lease-ms", "10000", url=url)
        worker_procs.append(worker)
        warm = BrandedId.generate()
        jobs.enqueue(queue, warm, PAYLOAD)
        wait_for(lambda: state_of(client, queue, warm) == "done")     # the worker is up
        ids = []
        for _ in range(12):
            job_id = BrandedId.generate()
            # A lease of the job's own: the worker extends its claim's lease
            # before the handler runs, on the full server.
            jobs.enqueue_in(queue, job_id, '{"job": "tests.testapp.jobs.nap_leased", '
                                           '"args": [200], "kwargs": {}}', 200)
            ids.append(job_id)
        used = int(client.info("memory")["used_memory"])
        client.config_set("maxmemory-policy", "noeviction")
        client.config_set("maxmemory", used // 2)
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            client.set(f"{queue}:probe", "x")     # full indeed: writes are refused
        time.sleep(1.5)
        client.config_set("maxmemory", 0)
        wait_for(lambda: all(state_of(client, queue, j) == "done" for j in ids), timeout=60)
        code, out = stop(worker)
        assert code == 0, out
        rows = [jobs.get(queue, j) for j in ids]
        # Each ran once and none failed: a second run or a retry would show
        # as attempts 2.
        assert [(r.state, r.attempts, r.result_value) for r in rows] == [("done", 1, 200)] * 12
        assert client.zcard(Keyspace(queue).dead) == 0
        assert "Traceback" not in out, out[-4000:]
    finally:
        client.close()
        stop_valkey_server(proc)


# -- 7. handler code can never kill its thread ----------------------------------------


def test_a_handler_raising_system_exit_fails_its_job_and_the_worker_goes_on(
        conn, queue, redis_client, worker_procs):
    bad = testjobs.exits.using(queue=queue).enqueue(f"{queue}:exits")
    worker = runechomq(queue, "--concurrency", "1")
    worker_procs.append(worker)
    wait_for(lambda: state_of(conn, queue, bad.job_id) == "dead")
    after = testjobs.add.using(queue=queue).enqueue(2, 2)
    wait_for(lambda: state_of(conn, queue, after.job_id) == "done")
    code, out = stop(worker)
    assert code == 0, out
    row = Jobs(conn).get(queue, bad.job_id)
    assert (row.reason, row.attempts) == ("failed", 2)
    assert "SystemExit: 3" in row.last_error
    assert redis_client.get(f"{queue}:exits") == "2"


def test_a_consumer_thread_dying_of_our_error_exits_non_zero(conn, redis_client, queue,
                                                             worker_procs):
    # A corrupt wake list (not a list): the idle wait fails with WRONGTYPE, an
    # error that does not pass on its own.
    redis_client.set(Keyspace(queue).wake, "not a list")
    worker = runechomq(queue, "--concurrency", "1", "--without-metronome")
    worker_procs.append(worker)
    try:
        out, _ = worker.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        raise AssertionError("runechomq did not exit:\n" + kill_all(worker)) from None
    assert worker.returncode == 70, out
    assert "consumer thread" in out and "died" in out and "WRONGTYPE" in out


# -- 9. --max-jobs runs exactly N --------------------------------------------------------


def test_max_jobs_runs_exactly_n_whatever_the_concurrency(conn, redis_client, queue,
                                                         worker_procs):
    handles = [testjobs.tally.using(queue=queue).enqueue(f"{queue}:runs", 50)
               for _ in range(20)]
    worker = runechomq(queue, "--concurrency", "4", "--max-jobs", "3")
    worker_procs.append(worker)
    out, _ = worker.communicate(timeout=30)
    assert worker.returncode == 0, out
    assert redis_client.scard(f"{queue}:runs") == 3
    states = [state_of(conn, queue, h.job_id) for h in handles]
    assert states.count("done") == 3 and states.count("pending") == 17


# -- 3. the heartbeat survives any error ---------------------------------------------------


def test_the_lease_keeper_survives_an_error_and_keeps_renewing(conn, queue):
    from echomq_django.runtime.lease_keeper import LeaseKeeper
    from echomq_django.runtime.slots import Slot, Slots

    jobs = Jobs(conn)
    _enqueue(jobs, queue, 2)
    broken = jobs.claim(queue, "w", 600)
    alive = jobs.claim(queue, "w", 600)
    slots = Slots()
    # A time limit whose outcome cannot be computed (a corrupt backoff policy):
    # the first beat raises inside the keeper's loop.
    bad = Slot(broken, 600, time.monotonic() - 10, timeout_ms=1, max_attempts=5,
               policy=("nonsense",))
    good = Slot(alive, 600, time.monotonic())
    stop_event = threading.Event()
    keeper = LeaseKeeper(jobs, slots, finish=lambda *a, **k: "retry", stop=stop_event,
                         lease_ms=600, name="test-keeper", queues=[queue],
                         describe=lambda: {})
    thread = threading.Thread(target=lambda: [slots.put(bad), keeper._loop()], daemon=True)
    slots_holder = threading.Thread(target=lambda: (slots.put(good), stop_event.wait()),
                                    daemon=True)
    slots_holder.start()
    thread.start()
    try:
        first = jobs.get(queue, alive.job_id).lease_until_ms
        wait_for(lambda: jobs.get(queue, alive.job_id).lease_until_ms > first + 300,
                 timeout=5)
        assert thread.is_alive()
    finally:
        stop_event.set()
        with slots._lock:
            slots._slots.clear()
        thread.join(5)


# -- 13. an outage is two log lines; an unreachable server one clear error --------------


@pytest.mark.slow
def test_a_server_outage_logs_one_line_down_and_one_back(tmp_path, queue, worker_procs):
    url, proc = start_valkey_server(tmp_path)
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        worker = runechomq(queue, "--concurrency", "2", url=url)
        worker_procs.append(worker)
        jobs = Jobs(client)
        job_id = BrandedId.generate()
        jobs.enqueue(queue, job_id, PAYLOAD)
        wait_for(lambda: state_of(client, queue, job_id) == "done")
        proc.kill()
        proc.wait()
        time.sleep(3)                                   # a few seconds of outage
        _, proc = start_valkey_server(tmp_path, port=port)
        later = BrandedId.generate()
        jobs.enqueue(queue, later, PAYLOAD)
        wait_for(lambda: state_of(client, queue, later) == "done", timeout=20)
        code, out = stop(worker)
        assert code == 0, out
        lost = [line for line in out.splitlines() if "is unavailable (" in line]
        back = [line for line in out.splitlines() if "is available again after" in line]
        assert len(lost) == 1 and len(back) == 1, out
        assert f"127.0.0.1:{port}" in lost[0]
        assert "Traceback" not in out
        assert len(out.splitlines()) < 40, out
    finally:
        client.close()
        stop_valkey_server(proc)


@pytest.mark.parametrize("url, words", [
    ("redis://:s3cret@127.0.0.1:1/0", "Connection refused"),
    (None, "DB index"),       # a db index the server lacks
])
def test_runechomq_against_an_unusable_server_says_so_and_exits_non_zero(
        valkey_url, start_valkey, queue, url, words):
    if url is None:
        # A cluster has database 0 only: then a throwaway server's URL.
        server_url = start_valkey()[0] if on_cluster(valkey_url) else valkey_url
        url = server_url.rsplit("/", 1)[0] + "/99"
    proc = runechomq(queue, url=url)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode != 0, out
    errors = [line for line in out.splitlines() if "cannot use the EchoMQ server at" in line]
    assert len(errors) == 1, out
    assert words.lower() in out.lower()
    assert "s3cret" not in out
    assert "Traceback" not in out


# -- 16, 21. typed errors for ids; the documents' extend_lock ----------------------------


@pytest.mark.parametrize("bad", [None, True, ["JOB1"], 7])
@pytest.mark.parametrize("call", ["ack", "dead", "snooze", "release", "extend", "progress",
                                  "retry", "cancel", "get"])
def test_a_job_id_that_is_not_a_str_is_a_type_error_naming_it(conn, queue, bad, call):
    jobs = Jobs(conn)
    calls = {
        "ack": lambda: jobs.ack(queue, bad, "t"),
        "dead": lambda: jobs.dead(queue, bad, "t", "failed"),
        "snooze": lambda: jobs.snooze(queue, bad, "t", 10),
        "release": lambda: jobs.release(queue, bad, "t"),
        "extend": lambda: jobs.extend(queue, bad, "t", 10),
        "progress": lambda: jobs.progress(queue, bad, "t", 10),
        "retry": lambda: jobs.retry(queue, bad, "t", 10),
        "cancel": lambda: jobs.cancel(queue, bad),
        "get": lambda: jobs.get(queue, bad),
    }
    with pytest.raises(TypeError, match="job_id must be a str"):
        calls[call]()


def test_extend_lock_is_the_lease_checkpoint(conn, queue, server_time_ms):
    jobs = Jobs(conn)
    _enqueue(jobs, queue)
    claim = jobs.claim(queue, "w", 1_000)
    before = server_time_ms()
    deadline = jobs.extend_lock(queue, claim.job_id, claim.token, 90_000)
    assert before + 90_000 <= deadline <= server_time_ms() + 90_000
    with pytest.raises(StaleTokenError):
        jobs.extend_lock(queue, claim.job_id, claim.token + "0", 90_000)


# -- 4. a reused id is never moved by a stale member ---------------------------------------


def _expire_and_reuse(redis_client, jobs, queue, job_id):
    """The row expires (as a done/dead row does after its TTL) and the same id
    is enqueued again: a fresh pending job whose id a stale member still names."""
    redis_client.delete(Keyspace(queue).job(job_id))
    assert jobs.enqueue(queue, job_id, PAYLOAD) == "enqueued"


def test_dead_letter_actions_leave_a_reused_id_alone(conn, redis_client, queue):
    from echomq_django.admin.actions import Actions

    jobs, ks = Jobs(conn), Keyspace(queue)
    letters = _enqueue(jobs, queue, 3)
    for _ in letters:
        claim = jobs.claim(queue, "w", 60_000)
        jobs.dead(queue, claim.job_id, claim.token, "failed", "boom")
    for job_id in letters:
        _expire_and_reuse(redis_client, jobs, queue, job_id)
    # A worker holds the first reused job; the others wait in pending.
    running = jobs.claim(queue, "w2", 60_000)
    before = {j: redis_client.hgetall(ks.job(j)) for j in letters}
    acts = Actions(conn)
    assert acts.retry_dead(queue, letters[0]) == "gone"
    assert acts.purge_dead(queue) == 2               # two stale members dropped ...
    assert {j: redis_client.hgetall(ks.job(j)) for j in letters} == before   # ... rows kept
    redis_client.zadd(ks.dead, {j: 1_000 for j in letters})
    assert acts.retry_all_dead(queue) == 0
    assert {j: redis_client.hgetall(ks.job(j)) for j in letters} == before
    assert redis_client.zcard(ks.dead) == 0          # the stale members are dropped
    assert sorted(redis_client.zrange(ks.pending, 0, -1)) == sorted(
        j for j in letters if j != running.job_id)
    assert jobs.ack(queue, running.job_id, running.token) == "done"   # its holder finishes


def test_promote_run_now_and_claim_skip_a_stale_member(conn, redis_client, queue,
                                                      server_time_ms):
    from echomq_django.admin.actions import Actions

    jobs, ks = Jobs(conn), Keyspace(queue)
    (job_id,) = _enqueue(jobs, queue)
    claim = jobs.claim(queue, "w", 60_000)
    # Stale members: the id in schedule and again in pending, while it runs.
    redis_client.zadd(ks.schedule, {job_id: server_time_ms() - 1000})
    # ... as a lane holds it: its set, the lanes index and total, and the ring.
    redis_client.zadd(ks.pending, {job_id: 0})
    redis_client.zincrby(ks.lanes, 1, "")
    redis_client.incr(ks.lanes_total)
    redis_client.zadd(ks.ring, {"": redis_client.incr(ks.turn)})
    row = redis_client.hgetall(ks.job(job_id))
    assert Actions(conn).run_now(queue, job_id) == "gone"
    redis_client.zadd(ks.schedule, {job_id: server_time_ms() - 1000})
    assert jobs.promote(queue) == 1                      # taken off schedule ...
    assert jobs.claim(queue, "w2", 60_000) is None       # ... and off pending, unclaimed
    assert redis_client.hgetall(ks.job(job_id)) == row   # the running job is untouched
    assert redis_client.zcard(ks.schedule) == redis_client.zcard(ks.pending) == 0
    assert redis_client.get(ks.lanes_total) == "0"
    assert jobs.ack(queue, job_id, claim.token) == "done"


# -- 10. every script does bounded work per call -------------------------------------------


def test_dead_letter_retention_is_bounded_per_call(conn, redis_client, queue, server_time_ms):
    jobs, ks = Jobs(conn), Keyspace(queue)
    # 5,000 letters long past their time to live (their rows expired already).
    old = server_time_ms() - 10_000_000
    pipe = redis_client.pipeline(transaction=False)
    for i in range(5000):
        pipe.zadd(ks.dead, {f"JOBOLD{i:06d}": old + i})
    pipe.execute()
    _enqueue(jobs, queue)
    claim = jobs.claim(queue, "w", 60_000)
    jobs.dead(queue, claim.job_id, claim.token, "failed", dead_ttl_ms=1_000_000)
    # One death trims at most 100 of them; each later death trims more.
    assert redis_client.zcard(ks.dead) == 5001 - 100
    for _ in range(3):
        _enqueue(jobs, queue)
        claim = jobs.claim(queue, "w", 60_000)
        jobs.dead(queue, claim.job_id, claim.token, "failed", dead_ttl_ms=1_000_000)
    assert redis_client.zcard(ks.dead) == 5004 - 400
    # Past dead_max, the oldest go, as many as TRIM per call too.
    _enqueue(jobs, queue)
    claim = jobs.claim(queue, "w", 60_000)
    jobs.dead(queue, claim.job_id, claim.token, "failed", dead_ttl_ms=1_000_000_000,
              dead_max=10)
    assert redis_client.zcard(ks.dead) == 4605 - 100


# -- 9. an enqueue whose reply is lost ------------------------------------------------


@pytest.mark.parametrize("how", ["enqueue", "enqueue_in", "enqueue_many"])
def test_an_enqueue_whose_connection_drops_is_neither_lost_nor_doubled(queue, redis_client,
                                                                       how):
    """CLIENT KILL every 20 ms while jobs are enqueued: an admission whose
    reply was lost is sent again (the id makes the repeat answer duplicate,
    which the caller is told as enqueued or scheduled)."""
    handles, refused = [], 0
    fn = testjobs.add.using(queue=queue)
    with killing_connections(redis_client):
        for i in range(300):
            try:
                if how == "enqueue":
                    handles.append(fn.enqueue(i, 0))
                elif how == "enqueue_in":
                    handles.append(fn.enqueue_in(60_000, i, 0))
                else:
                    handles.extend(fn.enqueue_many([(i, 0), (i, 1), (i, 2)]))
            except redis.ConnectionError:
                refused += 1      # after three tries: ambiguous (see the asserts)
    ks = Keyspace(queue)
    waiting = set(redis_client.zrange(ks.schedule if how == "enqueue_in" else ks.pending, 0, -1))
    told = {h.job_id for h in handles}
    # Every job the caller was told of is there (once: an id is one member);
    # a call whose three tries all failed may have been written by the first.
    assert told <= waiting and len(waiting - told) <= 3 * refused
    assert {str(h.outcome) for h in handles} == {
        "scheduled" if how == "enqueue_in" else "enqueued"}
    assert refused <= 1     # three tries each: without them, 2-13 of 300 here
