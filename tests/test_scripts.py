"""scripts: Lua headers, the loader's key/arg checks, NOSCRIPT reload, error codes, base roots."""

import json
import os
import re
import time

import pytest
import redis
from redis.exceptions import RedisClusterException

from echomq_django import exceptions, rules
from echomq_django.protocol import scripts
from echomq_django.protocol.ids import BrandedId
from echomq_django import Jobs
from echomq_django.protocol.keyspace import WAKE_CAP
from echomq_django.protocol.keyspace import Keyspace
from echomq_django.protocol.records import Finish
from echomq_django.rules import MIN_RUN_AT_MS
from tests.nodes import CROSS_SLOT, crosses_slots, on_cluster
from tests.state import queue_pattern, snapshot

#: The protocol's scripts; others may be added, these may not go missing.
PROTOCOL_SCRIPTS = ["jobs/ack", "jobs/claim", "jobs/dead", "jobs/enqueue", "queues/horizon",
                    "queues/promote", "queues/reap", "jobs/release", "jobs/retry", "jobs/schedule"]
SCRIPTS = scripts.script_names()
#: KEYS header labels that name a Keyspace attribute (``job`` is ``ks.job(id)``).
KEY_LABELS = {"pending", "schedule", "active", "dead", "repeat", "claims", "wake", "beat",
              "beat_at", "job",
              "repeat_record", "paused", "synced", "limits",
              "workers", "worker", "queues", "bucket",
              # the lanes' keys (admin/gauges reads them)
              "lanes", "lanes_total", "ring", "capped", "waiting",
              # the metronome's per-minute latency samples (queues/sample_latency)
              "latency"}





def keys_for(name: str, ks: Keyspace, job_id: str | None = None) -> list[str]:
    """The keys ``name``'s header names, built from the Keyspace."""
    return [ks.job(job_id) if label == "job" else getattr(ks, label)
            for label in scripts.source(name).keys]





# -- headers -------------------------------------------------------------


def test_script_names_include_the_protocol_scripts():
    assert set(PROTOCOL_SCRIPTS) <= set(SCRIPTS)
    assert SCRIPTS == sorted(SCRIPTS)


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_header_parses_and_names_keyspace_keys(name):
    src = scripts.source(name)
    assert src.name == name
    assert src.keys, f"{name}.lua names no KEYS"
    assert set(src.keys) <= KEY_LABELS, src.keys
    assert len(set(src.keys)) == len(src.keys)
    assert len(set(src.argv)) == len(src.argv)
    # Includes are expanded; none is left for the server to choke on.
    assert "@include" not in src.text
    # The body uses no KEYS index beyond the header's (nor an ARGV one).
    body = "\n".join(line for line in src.text.splitlines() if not line.startswith("--"))
    used_keys = {int(n) for n in re.findall(r"KEYS\[(\d+)\]", body)}
    used_argv = {int(n) for n in re.findall(r"ARGV\[(\d+)\]", body)}
    assert used_keys <= set(range(1, len(src.keys) + 1)), (name, used_keys)
    assert used_argv <= set(range(1, len(src.argv) + 1)), (name, used_argv)


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_script_compiles_on_the_server(redis_client, name):
    sha = redis_client.script_load(scripts.source(name).text)
    assert redis_client.script_exists(sha) == [True]


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_script_checks_its_declared_keys_and_any_base_root(name):
    # Every declared key is checked (check_keys: the queue's key the header
    # names); a script that builds keys in Lua takes them from the root of a
    # checked key, or from ARGV base, which check_keys checks too (the
    # hash-slot guarantee). tests/test_script_keys.py runs each check.
    src = scripts.source(name)
    raw = scripts._read(f"{name}.lua")
    if name == "limits/take":  # its one key is a limiter's, not a queue's
        assert "is not a rate limiter key" in raw and "base" not in src.argv
        return
    # register and upsert check theirs in includes/definition.lua.
    assert ("@include base" in raw and "check_keys(" in raw
            or "check_definition(KEYS, ARGV)" in raw), name
    if "base" in src.argv:
        index = src.argv.index("base") + 1
        # A literal spec, or one built up in a table first (finish's rows).
        assert re.search(rf"check_keys\((\{{.*?\}}|spec), ARGV\[{index}\]\)", raw, re.S), name
    elif ".. 'job:' .." in raw or "base .. " in raw:
        assert "queue_root(KEYS[" in raw, name


def test_header_out_of_order_is_rejected(tmp_path, monkeypatch):
    text = "-- KEYS[1] a\n-- KEYS[3] c\nreturn 1\n"
    monkeypatch.setattr(scripts, "_read", lambda relative: text)
    scripts.source.cache_clear()
    try:
        with pytest.raises(ValueError, match=r"header KEYS\[3\] is out of order"):
            scripts.source("broken")
    finally:
        scripts.source.cache_clear()


# -- the loader's checks -------------------------------------------------


@pytest.mark.parametrize(
    "keys_delta, args_delta",
    [(-1, 0), (1, 0), (0, -1), (0, 1)],
)
def test_key_or_arg_count_mismatch_raises_type_error_and_writes_nothing(
    conn, redis_client, queue, keys_delta, args_delta
):
    ks = Keyspace(queue)
    job_id = BrandedId.generate()
    keys = [ks.job(job_id), ks.pending, ks.wake, ks.claims][: 3 + keys_delta]
    args = [job_id, "{}", WAKE_CAP, "", 0, "extra"][: 5 + args_delta]
    with pytest.raises(TypeError, match=r"jobs/enqueue\.lua takes KEYS \['job', 'pending', 'wake'\]"):
        scripts.run(conn, "jobs/enqueue", keys, args)
    assert snapshot(redis_client, queue_pattern(queue)) == {}


def test_run_returns_str_not_bytes(conn, queue):
    ks = Keyspace(queue)
    job_id = BrandedId.generate()
    Jobs(conn).enqueue(queue, job_id, '{"a": 1}')
    reply = scripts.run(conn, "jobs/claim", keys_for("jobs/claim", ks),
                        [ks.base, "me", 1000, WAKE_CAP, "t1", 1])
    assert reply[2][0] == job_id
    assert all(not isinstance(part, bytes) for part in reply[2])


def test_unknown_script_raises_file_not_found(conn):
    with pytest.raises(FileNotFoundError):
        scripts.run(conn, "no_such_script", [], [])


# -- every Jobs method passes the keys its script's header names ----------


def test_jobs_methods_pass_exactly_the_header_keys_in_order(conn, queue, monkeypatch):
    calls = []
    real_run = scripts.run

    def recording_run(client, name, keys, args):
        calls.append((name, list(keys), list(args)))
        return real_run(client, name, keys, args)

    monkeypatch.setattr(scripts, "run", recording_run)
    jobs = Jobs(conn)
    ks = Keyspace(queue)
    a, b, c, d = (BrandedId.generate() for _ in range(4))

    jobs.enqueue(queue, a, "{}")
    jobs.enqueue(queue, b, "{}")
    jobs.enqueue(queue, c, "{}")
    jobs.enqueue_at(queue, d, "{}", MIN_RUN_AT_MS)
    jobs.enqueue_in(queue, BrandedId.generate(), "{}", 60_000)
    jobs.promote(queue)
    first = jobs.claim(queue, "w1", 60_000)
    jobs.ack(queue, first.job_id, first.token, {"ok": True})
    second = jobs.claim(queue, "w1", 60_000)
    jobs.retry(queue, second.job_id, second.token, 60_000, "boom")
    third = jobs.claim(queue, "w1", 60_000)
    jobs.dead(queue, third.job_id, third.token, "failed", "boom")
    fourth = jobs.claim(queue, "w1", 60_000)
    jobs.extend(queue, fourth.job_id, fourth.token, 90_000)
    jobs.release(queue, fourth.job_id, fourth.token)
    fifth = jobs.claim(queue, "w1", 60_000)
    jobs.finish_many(queue, [Finish("ack", fifth.job_id, fifth.token)], consumer="w1",
                     lease_ms=60_000, count=1)
    jobs.reap(queue)
    jobs.horizon(queue)

    # The Jobs surface runs exactly these; the registry's scripts are checked
    # the same way against Repeat in tests/test_repeat.py.
    jobs_scripts = {"jobs/enqueue", "jobs/schedule", "queues/promote", "jobs/claim", "jobs/ack",
                    "jobs/retry", "jobs/dead", "queues/reap", "jobs/release", "jobs/extend",
                    "jobs/finish", "queues/horizon"}
    assert jobs_scripts <= set(SCRIPTS)
    assert {name for name, _, _ in calls} == jobs_scripts
    for name, keys, args in calls:
        src = scripts.source(name)
        job_id = args[src.argv.index("job_id")] if "job_id" in src.argv else None
        if src.argv_variadic:   # one lease or outcome: its id leads (finish's follows its op)
            tail = args[len(src.argv) - 1:]
            job_id = tail[1] if name == "jobs/finish" else tail[0]
        assert keys == keys_for(name, ks, job_id), name
        assert len(args) == len(src.argv) or (src.argv_variadic and len(args) >= len(src.argv)), \
            name
        if "base" in src.argv:
            assert args[src.argv.index("base")] == ks.base, name
        if "wake_cap" in src.argv:
            assert args[src.argv.index("wake_cap")] == WAKE_CAP, name


# -- NOSCRIPT reload -----------------------------------------------------


@pytest.mark.skipif(bool(os.environ.get("ECHOMQ_TEST_URL")),
                    reason="SCRIPT FLUSH only on the server this suite started")
def test_noscript_after_script_flush_reloads(conn, redis_client, queue):
    jobs = Jobs(conn)
    jobs.enqueue(queue, BrandedId.generate(), "{}")
    sha = scripts._script(conn, "jobs/enqueue").sha

    def loaded() -> bool:
        # Where the queue's scripts run: on a cluster, its node (a reload
        # after NOSCRIPT loads there only).
        if on_cluster():
            node = redis_client.get_node_from_key(Keyspace(queue).base)
            return redis_client.execute_command("SCRIPT EXISTS", sha, target_nodes=node) == [True]
        return redis_client.script_exists(sha) == [True]

    assert loaded()
    redis_client.script_flush()
    assert not loaded()
    job_id = BrandedId.generate()
    assert jobs.enqueue(queue, job_id, "{}") == "enqueued"
    assert loaded()
    assert redis_client.hget(Keyspace(queue).job(job_id), "state") == "pending"


# -- error codes ---------------------------------------------------------


def _server_error(client: redis.Redis, message: str) -> redis.ResponseError:
    with pytest.raises(redis.ResponseError) as info:
        client.eval("return redis.error_reply(ARGV[1])", 0, message)
    return info.value


@pytest.mark.parametrize(
    "code, cls",
    [
        ("EMQKIND", exceptions.KindError),
        ("EMQSTALE", exceptions.StaleTokenError),
        ("EMQSTATE", exceptions.StateError),
        ("EMQNOJOB", exceptions.NoSuchJobError),
        ("EMQKEY", ValueError),
        ("EMQARG", ValueError),
    ],
)
def test_error_codes_map_to_exceptions(redis_client, code, cls):
    assert scripts.ERROR_CODES[code] is cls
    translated = scripts.translate(_server_error(redis_client, f"{code} what went wrong"))
    assert type(translated) is cls
    assert str(translated) == "what went wrong"


def test_error_code_table_is_complete():
    assert set(scripts.ERROR_CODES) == {"EMQKIND", "EMQSTALE", "EMQSTATE", "EMQNOJOB",
                                        "EMQKEY", "EMQARG"}


def test_domain_exceptions_share_the_root():
    for code, cls in scripts.ERROR_CODES.items():
        if cls is not ValueError:
            assert issubclass(cls, exceptions.EchoMQError), code


def test_unknown_error_is_returned_unchanged(redis_client):
    err = _server_error(redis_client, "WHATEVER something")
    assert scripts.translate(err) is err
    bare = _server_error(redis_client, "EMQKIND")
    translated = scripts.translate(bare)
    assert type(translated) is exceptions.KindError


def test_run_raises_the_mapped_exception_from_a_real_script(conn, queue):
    ks = Keyspace(queue)
    job_id = BrandedId.generate("USR")
    with pytest.raises(exceptions.KindError, match="job id must be JOB-namespaced"):
        scripts.run(conn, "jobs/enqueue", [ks.job(job_id), ks.pending, ks.wake],
                    [job_id, "{}", 1, "", 0])
    with pytest.raises(exceptions.StaleTokenError, match="job row does not exist"):
        job_id = BrandedId.generate()
        scripts.run(conn, "jobs/ack", [ks.job(job_id), ks.active, ks.claims],
                    [job_id, "1", "", 1000, ks.base, 60_000])


def test_other_server_errors_pass_through_as_redis_errors(conn, redis_client, queue):
    ks = Keyspace(queue)
    redis_client.set(ks.pending, "not a zset")
    job_id = BrandedId.generate()
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        Jobs(conn).enqueue(queue, job_id, "{}")


# -- the base root must be the queue's own --------------------------------


def _wrong_bases(queue: str) -> list[str]:
    ks = Keyspace(queue)
    return [
        "emq:{other-queue}:",     # another queue's root: another hash slot
        "",                       # a prefix of every key, no hash tag at all
        "emq:",                   # a prefix of the key, but drops the tag
        "emq:{",                  # ditto
        ks.base[:-1],             # "emq:{q}": the tag without the separator
        ks.base + "p",            # a prefix of ".../pending" but not the root
        "emq:{" + queue[:-1],     # a shorter tag: another queue's slot
    ]


def _base_cases(jobs: Jobs, queue: str):
    """(script, keys, args builder) for each script that takes a base root,
    with the queue set up so a run would change something."""
    ks = Keyspace(queue)
    scheduled = BrandedId.generate()
    jobs.enqueue_at(queue, scheduled, "{}", MIN_RUN_AT_MS)  # due now: promote would move it
    held = BrandedId.generate()
    jobs.enqueue(queue, held, "{}")
    claim = jobs.claim(queue, "w", 1)                   # 1 ms lease: reap would take it
    assert claim.job_id == held
    waiting = BrandedId.generate()
    jobs.enqueue(queue, waiting, "{}")
    dying = jobs.claim(queue, "w", 60_000)              # dead would end it
    assert dying.job_id == waiting
    acking = BrandedId.generate()
    jobs.enqueue(queue, acking, "{}")
    to_ack = jobs.claim(queue, "w", 60_000)             # ack would finish it
    retrying = BrandedId.generate()
    jobs.enqueue(queue, retrying, "{}")
    to_retry = jobs.claim(queue, "w", 60_000)           # retry would re-park it
    finishing = BrandedId.generate()
    jobs.enqueue(queue, finishing, "{}")
    to_finish = jobs.claim(queue, "w", 60_000)          # finish would ack it
    spare = BrandedId.generate()
    jobs.enqueue(queue, spare, "{}")                    # claim would pop it
    batch = BrandedId.generate()                        # enqueue_many would admit it
    return {
        "jobs/finish": (keys_for("jobs/finish", ks, to_finish.job_id),
                        lambda base: [base, "w", 60_000, WAKE_CAP, "tb", 1, 60_000, 60_000, 10,
                                      60_000, "ack", to_finish.job_id, to_finish.token, "", "",
                                      ""]),
        "jobs/ack": (keys_for("jobs/ack", ks, to_ack.job_id),
                lambda base: [to_ack.job_id, to_ack.token, "", 60_000, base, 60_000]),
        "jobs/retry": (keys_for("jobs/retry", ks, to_retry.job_id),
                  lambda base: [to_retry.job_id, to_retry.token, 10, "err", base, 60_000,
                                60_000]),
        "queues/promote": (keys_for("queues/promote", ks), lambda base: [base, 1000, WAKE_CAP]),
        "queues/reap": (keys_for("queues/reap", ks), lambda base: [base, 1000, WAKE_CAP, 1, 60_000, 60_000,
                                                    60_000, 10]),
        "jobs/claim": (keys_for("jobs/claim", ks),
                       lambda base: [base, "w", 60_000, WAKE_CAP, "t1", 1]),
        "jobs/dead": (keys_for("jobs/dead", ks, dying.job_id),
                 lambda base: [dying.job_id, dying.token, "failed", "err", base, 60_000, 1,
                               60_000, 60_000]),
        "jobs/enqueue_many": (keys_for("jobs/enqueue_many", ks),
                              lambda base: [base, WAKE_CAP, 1, 0, _items(batch)]),
        "queues/sample_latency": (keys_for("queues/sample_latency", ks),
                                  lambda base: [base, 100, 8, 60, 60_000]),
    }, [scheduled, held, waiting, acking, retrying, finishing, spare, batch]


def _items(*ids: str) -> str:
    """enqueue_many's items: each id now, ungrouped, priority 0."""
    return json.dumps([[job_id, "{}", "", "0", "", "0"] for job_id in ids])


def test_the_scripts_taking_a_base_are_the_ones_tested_here():
    # The admin's scripts (admin/*.lua) test their base roots in tests/test_admin.py.
    assert [n for n in SCRIPTS
            if "base" in scripts.source(n).argv and not n.startswith("admin/")] == [
        "jobs/ack", "jobs/claim", "jobs/dead", "jobs/enqueue_many", "jobs/finish", "jobs/retry",
        "queues/promote", "queues/reap", "queues/sample_latency"]


@pytest.mark.parametrize("name", ["jobs/ack", "jobs/claim", "jobs/dead", "jobs/finish",
                                  "queues/promote", "queues/reap", "jobs/retry",
                                  "jobs/enqueue_many", "queues/sample_latency"])
def test_a_base_that_is_not_the_queue_root_is_refused_and_nothing_is_written(
    conn, redis_client, queue, name
):
    jobs = Jobs(conn)
    cases, ids = _base_cases(jobs, queue)
    time.sleep(0.01)  # let the 1 ms lease lapse, so a right-base reap has work
    keys, build_args = cases[name]
    before = snapshot(redis_client, queue_pattern(queue))
    for base in _wrong_bases(queue):
        with pytest.raises(ValueError, match="base root") as info:
            scripts.run(conn, name, keys, build_args(base))
        assert not isinstance(info.value, exceptions.KindError)
        assert snapshot(redis_client, queue_pattern(queue)) == before, base
        for job_id in ids:
            assert redis_client.exists(base + "job:" + job_id) == 0
    # The right base does work, so the refusal above was about the base alone.
    scripts.run(conn, name, keys, build_args(Keyspace(queue).base))
    assert snapshot(redis_client, queue_pattern(queue)) != before


# -- every script checks every argument before its first write (issue 9, item 11) ------

#: ARGV labels that carry a number; each script refuses garbage in them.
NUMERIC_ARGV = {"keep_ms", "stats_ttl_ms", "delay_ms", "dead_ttl_ms", "dead_max", "lease_ms",
                "wake_cap", "batch", "max_stalls", "percent", "value", "ttl_ms", "cutoff_ms",
                "priority", "count", "wake", "first", "keep_minutes"}


def _writing_calls(conn, redis_client, queue):
    """script -> (keys, args) that would write, each against a queue set up so."""
    jobs = Jobs(conn)
    ks = Keyspace(queue)
    base = ks.base
    ids = [BrandedId.generate() for _ in range(14)]
    for job_id in ids[:10]:
        jobs.enqueue(queue, job_id, "{}")
    held = [jobs.claim(queue, "w", 60_000) for _ in range(8)]
    expiring = jobs.claim(queue, "w", 1)
    fresh = ids[10]
    jobs.enqueue_in(queue, ids[11], "{}", 0)
    jobs.enqueue(queue, ids[12], "{}")
    fin = jobs.claim(queue, "w", 60_000, token="tok-held")  # finish retries it
    jobs.enqueue(queue, ids[13], "{}")                      # ... and claims one
    dying = held[7]
    jobs.dead(queue, dying.job_id, dying.token, "failed")
    paused = Keyspace(queue + "-p").paused    # resume's queue; claim's is not paused
    redis_client.set(paused, 1)
    time.sleep(0.01)
    a, r, s, d, x, p, rel = held[:7]
    return {
        "jobs/enqueue": ([ks.job(fresh), ks.pending, ks.wake], [fresh, "{}", WAKE_CAP, "g", 5]),
        "jobs/schedule": ([ks.job(fresh), ks.schedule, ks.beat],
                          [fresh, "{}", "in", 10, "g", 5]),
        "jobs/enqueue_many": ([ks.pending, ks.schedule, ks.wake, ks.beat],
                              [base, WAKE_CAP, 1, 0, _items(fresh)]),
        "jobs/ack": ([ks.job(a.job_id), ks.active, ks.claims],
                     [a.job_id, a.token, "", 60_000, base, 60_000]),
        "jobs/retry": ([ks.job(r.job_id), ks.active, ks.claims, ks.schedule, ks.beat],
                       [r.job_id, r.token, 10, "e", base, 60_000, 60_000]),
        "jobs/snooze": ([ks.job(s.job_id), ks.active, ks.claims, ks.schedule, ks.beat],
                        [s.job_id, s.token, 10, 60_000]),
        "jobs/dead": ([ks.job(d.job_id), ks.active, ks.claims, ks.dead],
                      [d.job_id, d.token, "failed", "e", base, 60_000, 10, 60_000, 60_000]),
        "jobs/extend": ([ks.active, ks.beat, ks.job(x.job_id)], [x.job_id, x.token, 60_000]),
        "jobs/finish": ([ks.pending, ks.active, ks.claims, ks.wake, ks.beat, ks.paused,
                         ks.schedule, ks.dead, ks.job(fin.job_id)],
                        [base, "w", 60_000, WAKE_CAP, "tok-fin", 1, 60_000, 60_000, 10, 60_000,
                         "retry", fin.job_id, fin.token, 10, "e", "builtins.ValueError"]),
        "jobs/progress": ([ks.job(p.job_id)], [p.job_id, p.token, 50, "m"]),
        "jobs/metadata": ([ks.job(p.job_id)], [p.job_id, p.token, '{"k":1}']),
        "jobs/release": ([ks.active, ks.claims, ks.pending, ks.wake, ks.job(rel.job_id)],
                         [WAKE_CAP, 60_000, rel.job_id, rel.token]),
        "jobs/cancel": ([ks.job(ids[9]), ks.pending, ks.schedule], [ids[9], 60_000]),
        "jobs/claim": ([ks.pending, ks.active, ks.claims, ks.wake, ks.beat, ks.paused],
                       [base, "w", 60_000, WAKE_CAP, "tok-claim", 2]),
        "queues/promote": ([ks.schedule, ks.pending, ks.wake], [base, 10, WAKE_CAP]),
        "queues/reap": ([ks.active, ks.pending, ks.wake, ks.dead, ks.claims],
                        [base, 10, WAKE_CAP, 1, 60_000, 60_000, 60_000, 10]),
        "queues/resume": ([paused, Keyspace(queue + "-p").pending, Keyspace(queue + "-p").wake],
                          [WAKE_CAP]),
        "admin/run_now": ([ks.job(ids[11]), ks.schedule, ks.pending, ks.wake],
                          [ids[11], WAKE_CAP]),
        "admin/retry_dead": ([ks.job(dying.job_id), ks.dead, ks.pending, ks.wake],
                             [dying.job_id, WAKE_CAP]),
        "admin/retry_all_dead": ([ks.dead, ks.pending, ks.wake], [base, 10, "", WAKE_CAP]),
        "admin/purge_dead": ([ks.dead], [base, 10, ""]),
        "queues/sample_latency": ([ks.lanes, ks.ring, ks.latency], [base, 100, 8, 60, 60_000]),
    }, expiring


#: Not decimal integers in range. The second line is what Lua's tonumber
#: takes as a number (hex, blanks around, exponents, a float that is whole):
#: the scripts accept decimal digits with an optional leading '-' only.
GARBAGE = ["x", "-500", "1.5", "", "1e400", "1e17", "nan",
           "0x10", " 5", "5 ", "\t5", "1e3", "5.0", "+5", "- 5", "5\n",
           "9007199254740993"]   # 2**53 + 1, which a Lua number reads as 2**53


def test_every_numeric_argument_is_covered_here():
    covered = {"jobs/claim", "jobs/enqueue", "jobs/enqueue_many", "jobs/schedule", "jobs/ack",
               "jobs/retry", "jobs/snooze", "jobs/dead", "jobs/extend", "jobs/finish",
               "jobs/progress", "jobs/release", "jobs/cancel",
               "queues/promote", "queues/reap", "queues/resume", "admin/run_now",
               "admin/retry_dead", "admin/retry_all_dead", "admin/purge_dead",
               "queues/sample_latency"}
    # The registry's and presence's are covered below, limits/take in tests/test_limits.py.
    takes_numbers = {n for n in SCRIPTS if not n.startswith(("repeat/", "presence/", "limits/"))
                     and NUMERIC_ARGV & set(scripts.source(n).argv)}
    assert takes_numbers <= covered, takes_numbers - covered
    # A variadic tail carries numbers under no label of its own: NUMERIC_TAIL names them.
    assert {n for n in SCRIPTS if scripts.source(n).argv_variadic} == set(NUMERIC_TAIL)


#: Numeric entries inside a variadic ARGV tail, by index in _writing_calls'
#: args: extend's lease_ms, finish's first outcome's delay_ms (a retry).
NUMERIC_TAIL = {"jobs/extend": {2: "lease_ms"}, "jobs/finish": {13: "delay_ms"},
                "jobs/release": {}}


@pytest.mark.parametrize("name", sorted([
    "jobs/claim", "jobs/enqueue", "jobs/enqueue_many", "jobs/schedule", "jobs/ack", "jobs/retry",
    "jobs/snooze", "jobs/dead", "jobs/extend", "jobs/finish", "jobs/progress", "jobs/release",
    "jobs/cancel", "queues/promote",
    "queues/reap", "queues/resume", "admin/run_now", "admin/retry_dead",
    "admin/retry_all_dead", "admin/purge_dead", "queues/sample_latency"]))
def test_garbage_in_a_numeric_argument_is_refused_before_any_write(
        conn, redis_client, queue, name):
    calls, _ = _writing_calls(conn, redis_client, queue)
    keys, args = calls[name]
    src = scripts.source(name)
    labels = {i: label for i, label in enumerate(src.argv) if label in NUMERIC_ARGV}
    labels.update(NUMERIC_TAIL.get(name, {}))
    numeric = sorted(labels)
    assert numeric, name
    def state():  # resume's queue is queue-p
        return {**snapshot(redis_client, queue_pattern(queue)),
                **snapshot(redis_client, queue_pattern(queue + "-p"))}

    before = state()
    for i in numeric:
        for bad in GARBAGE:
            if labels[i] == "cutoff_ms" and bad == "":
                continue  # '' means the server's now there
            broken = list(args)
            broken[i] = bad
            with pytest.raises(ValueError, match="EMQARG|must be an integer") as info:
                scripts.run(conn, name, keys, broken)
            assert labels[i] in str(info.value), (name, bad, info.value)
            assert state() == before, (name, i, bad)
    # The call as built does write, so the refusals above were about the garbage.
    scripts.run(conn, name, keys, args)
    assert state() != before


#: ARGV labels that carry JSON text the scripts store; each script refuses
#: text that is not JSON, and where its header says "JSON object", a scalar.
JSON_ARGV = {"payload", "result", "definition", "timing", "template"}
NOT_JSON = ["", "{", "x", "{'a': 1}", '{"a": 1} trailing', "[1,]", "\"open"]
NOT_OBJECTS = ["5", '"x"', "null", "true"]
JSON_SCRIPTS = ["jobs/ack", "jobs/enqueue", "jobs/schedule", "repeat/mint", "repeat/register",
                "repeat/run_now", "repeat/upsert"]


def test_every_json_argument_is_covered_here():
    takes_json = {n for n in SCRIPTS if JSON_ARGV & set(scripts.source(n).argv)}
    assert takes_json == set(JSON_SCRIPTS)


@pytest.mark.parametrize("name", JSON_SCRIPTS)
def test_text_that_is_not_json_is_refused_before_any_write(
        conn, redis_client, queue, server_time_ms, name):
    calls, _ = _writing_calls(conn, redis_client, queue)
    calls.update(_repeat_calls(conn, redis_client, queue, server_time_ms))
    keys, args = calls[name]
    src = scripts.source(name)
    before = snapshot(redis_client, queue_pattern(queue))
    checked = [i for i, label in enumerate(src.argv) if label in JSON_ARGV]
    assert checked, name
    for i in checked:
        objects = "JSON object" in _header_line(name, "ARGV", i + 1)
        for bad in NOT_JSON + (NOT_OBJECTS if objects else []):
            if bad == "" and src.argv[i] == "result":
                continue  # '' is "no result" there
            broken = list(args)
            broken[i] = bad
            with pytest.raises(ValueError, match="must be (JSON text|a JSON object)") as info:
                scripts.run(conn, name, keys, broken)
            assert str(info.value).startswith(src.argv[i] + " must be"), (name, bad, info.value)
            assert snapshot(redis_client, queue_pattern(queue)) == before, (name, i, bad)
    if name == "jobs/ack":   # the call as built has no result; one with a result writes
        args = [*args[:2], '{"ok": [1, 2.5, null]}', *args[3:]]
    scripts.run(conn, name, keys, args)
    assert snapshot(redis_client, queue_pattern(queue)) != before


#: JSON texts Python's json reads (and rules.check_payload_text passes) that
#: the server's cjson alone would refuse or mangle: escaped lone surrogates
#: (json.dumps writes them for a str holding one), an escaped backslash before
#: "ud800", a valid pair, and a number too big for a double.
JSON_EDGES = ['"\\ud800"', '{"a": "x\\udfff y"}', '["\\\\ud800"]', '"\\ud83d\\ude00"',
              '{"n": 1e999}', ' [] ']


@pytest.mark.parametrize("text", JSON_EDGES)
def test_json_the_python_side_passes_is_taken_by_the_scripts(conn, redis_client, queue, text):
    rules.check_payload_text(text, 1000)
    job_id = BrandedId.generate()
    assert Jobs(conn).enqueue(queue, job_id, text) == "enqueued"
    assert redis_client.hget(Keyspace(queue).job(job_id), "payload") == text


def _header_line(name: str, kind: str, index: int) -> str:
    """The header line of ``name``'s KEYS or ARGV entry ``index`` (1-based)."""
    prefix = f"-- {kind}[{index}] "
    return next(line for line in scripts._read(f"{name}.lua").splitlines()
                if line.startswith(prefix))


@pytest.mark.parametrize("name", ["jobs/ack", "jobs/retry", "jobs/snooze", "jobs/dead",
                                  "jobs/extend", "jobs/progress", "jobs/metadata", "jobs/release",
                                  "jobs/cancel", "jobs/enqueue", "admin/run_now",
                                  "admin/retry_dead"])
def test_a_row_key_that_does_not_name_the_job_is_refused(conn, redis_client, queue, name):
    calls, _ = _writing_calls(conn, redis_client, queue)
    keys, args = calls[name]
    before = snapshot(redis_client, queue_pattern(queue))
    wrongs = [Keyspace(queue).job("JOBOTHER")]
    if len(keys) > 1:  # another queue's row is told by the queue's other keys
        wrongs.append(Keyspace("elsewhere").job(args[0]))
    for wrong in wrongs:
        if crosses_slots(conn, [wrong, *keys[1:]]):
            # A cluster refuses keys of several slots before any script runs.
            with pytest.raises((RedisClusterException, redis.ResponseError), match=CROSS_SLOT):
                scripts.run(conn, name, [wrong, *keys[1:]], args)
        else:
            # A script taking a base root finds the row's root is not the base's.
            with pytest.raises(ValueError, match="must be emq:|base root"):
                scripts.run(conn, name, [wrong, *keys[1:]], args)
        assert snapshot(redis_client, queue_pattern(queue)) == before


REPEAT_NUMERIC = {"every_ms", "start_at_ms", "first_run_ms", "expected_ms", "next_ms",
                  "slot_ms", "count", "wake_cap", "limit", "ttl_ms"}


def _repeat_calls(conn, redis_client, queue, server_time_ms):
    """The registry's and presence's scripts, each as a call that would write."""
    from echomq_django.repeat import Repeat

    ks = Keyspace(queue)
    rep = Repeat(conn)
    now = server_time_ms()
    rep.register(queue, "a", every_ms=60_000, tz="UTC", template={})
    score = int(redis_client.zscore(ks.repeat, "a"))
    version = redis_client.hget(ks.repeat_record("a"), "version")
    job_id = BrandedId.generate()
    definition = ["b", '{"x":1}', '{"y":1}', 60_000, "", "UTC", "{}", "coalesce", "", now]
    return {
        "repeat/register": ([ks.repeat, ks.repeat_record("b"), ks.beat], definition),
        "repeat/upsert": ([ks.repeat, ks.repeat_record("b"), ks.beat], definition),
        "repeat/mint": ([ks.repeat, ks.repeat_record("a"), ks.job(job_id), ks.pending, ks.wake,
                         ks.beat],
                        ["a", score, score + 60_000, version, job_id, '{"job":"x"}', score, 0,
                         WAKE_CAP]),
        "repeat/run_now": ([ks.repeat_record("a"), ks.job(job_id), ks.pending, ks.wake],
                           ["a", version, job_id, '{"job":"x"}', now, WAKE_CAP]),
        "repeat/drop_member": ([ks.repeat, ks.repeat_record("zz")], ["zz", 5, ""]),
        "presence/announce": (["emq:{~}:workers", "emq:{~}:worker:" + queue, "emq:{~}:queues"],
                              [queue, 60_000, "{}", "[]"]),
    }


@pytest.mark.parametrize("name", ["repeat/register", "repeat/upsert", "repeat/mint",
                                  "repeat/run_now", "repeat/drop_member", "presence/announce"])
def test_the_registry_s_scripts_refuse_garbage_before_any_write(
        conn, redis_client, queue, server_time_ms, name):
    calls = _repeat_calls(conn, redis_client, queue, server_time_ms)
    if name == "repeat/drop_member":
        redis_client.zadd(Keyspace(queue).repeat, {"zz": 5})   # a member without a record
    keys, args = calls[name]
    src = scripts.source(name)

    def state():
        return {**snapshot(redis_client, queue_pattern(queue)),
                "workers": redis_client.zrange("emq:{~}:workers", 0, -1)}

    before = state()
    numeric = [i for i, label in enumerate(src.argv) if label in REPEAT_NUMERIC]
    assert numeric, name
    for i in numeric:
        for bad in GARBAGE:
            if bad == "" and src.argv[i] in ("every_ms", "start_at_ms"):
                continue  # '' means none there
            broken = list(args)
            broken[i] = bad
            with pytest.raises(ValueError, match="EMQARG|must be an integer|exactly one") as info:
                scripts.run(conn, name, keys, broken)
            assert src.argv[i] in str(info.value) or "exactly one" in str(info.value)
            assert state() == before, (name, src.argv[i], bad)
    scripts.run(conn, name, keys, args)
    assert state() != before


def test_an_integer_argument_of_2_53_is_taken_and_one_more_is_refused(conn, redis_client, queue):
    # A Lua number reads 2**53 + 1 as 2**53; the check reads the digits.
    ks = Keyspace(queue)
    keys = [ks.pending, ks.active, ks.claims, ks.wake, ks.beat, ks.paused]
    for lease_ms in ("9007199254740992", "09007199254740992"):
        reply = scripts.run(conn, "jobs/claim", keys, [ks.base, "w", lease_ms, 100, "t", 1])
        assert reply[2:] == []          # taken (nothing to claim)
    with pytest.raises(ValueError, match="lease_ms must be an integer"):
        scripts.run(conn, "jobs/claim", keys, [ks.base, "w", "9007199254740993", 100, "t", 1])


def test_warm_sources_builds_every_script_once():
    scripts.source.cache_clear()
    scripts.warm_sources()
    assert scripts.source.cache_info().currsize == len(scripts.script_names())
    built = scripts.source.cache_info().misses
    scripts.warm_sources()
    assert scripts.source.cache_info().misses == built  # cached: nothing built again


def test_helpers_nothing_calls_are_left_out_and_the_rest_kept():
    text = ("local function a(x)\n  return b(x)\nend\n"       # unused: dropped
            "local function b(x)\n  return x\nend\n"          # only a calls it: dropped next
            "local function c()\n  return 1\nend\n"           # called: kept
            "local function cc()\n  return 2\nend\n"          # 'cc' is not 'c': dropped
            "-- a comment that names b()\n"
            "return c()\n")
    assert scripts._unused_helpers_out(text) == ("local function c()\n  return 1\nend\n"
                                                 "-- a comment that names b()\n"
                                                 "return c()\n")


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_helper_a_script_defines_is_called(name):
    text = scripts.source(name).text
    code = re.sub(r"(?m)^\s*--[^\n]*", "", text)
    for helper in re.findall(r"(?m)^local function (\w+)\(", text):
        assert len(re.findall(rf"\b{helper}\b", code)) > 1, helper
