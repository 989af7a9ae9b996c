"""Malformed registry members (issue 9, item 3): a member whose name no
schedule can have (``""``, a name with whitespace), written by hand or by a
client other than ours, is taken off the registry by the pump and by sync;
it never fails a beat. register and upsert refuse such names, in Python and
in Lua (docs/repeat.md, "The pump", "drop_member.lua")."""

from __future__ import annotations

import logging

import pytest

from echomq_django.protocol import scripts
from echomq_django.protocol.keyspace import Keyspace
from echomq_django.repeat import Repeat, sync
from echomq_django.runtime.metronome import Metronome
from tests.state import queue_pattern, snapshot

TEMPLATE = {"job": "app.jobs.digest", "args": [], "kwargs": {}}


@pytest.fixture
def rep(redis_client):
    return Repeat(redis_client)


def _plant(redis_client, queue, due_ms):
    """A live schedule "tick" and two malformed members, all due: "" without
    a record and "a b" with a copy of tick's record."""
    ks = Keyspace(queue)
    Repeat(redis_client).register(queue, "tick", every_ms=60_000, template=TEMPLATE)
    redis_client.hset(ks.repeat_record("a b"), mapping=redis_client.hgetall(ks.repeat_record("tick")))
    redis_client.zadd(ks.repeat, {"tick": due_ms, "": due_ms, "a b": due_ms})


def test_the_beat_drops_malformed_members_and_mints_the_rest(
        rep, redis_client, queue, server_time_ms, caplog):
    ks = Keyspace(queue)
    _plant(redis_client, queue, server_time_ms() - 10)
    metronome = Metronome(redis_client, [queue], pump=rep.pump)
    with caplog.at_level(logging.ERROR, logger="echomq.repeat"):
        assert metronome.beat(queue) == (0, 0, 1)          # tick minted, nothing raised
    assert redis_client.zrange(ks.repeat, 0, -1) == ["tick"]
    assert "''" in caplog.text and "'a b'" in caplog.text
    assert redis_client.exists(ks.repeat_record("a b"))   # kept for inspection
    assert redis_client.zcard(ks.pending) == 1
    assert metronome.beat(queue) == (0, 0, 0)              # and the next beat is clean


def test_sync_drops_malformed_members(rep, redis_client, queue, server_time_ms):
    ks = Keyspace(queue)
    _plant(redis_client, queue, server_time_ms() + 60_000)
    counts = sync(redis_client, [], prune=True, queues=[queue])
    assert counts["orphans"] == 2 and counts["removed"] == 1   # "", "a b"; tick undeclared
    assert redis_client.zcard(ks.repeat) == 0


@pytest.mark.parametrize("name", ["", "a b", "tab\there"])
@pytest.mark.parametrize("verb", ["register", "upsert"])
def test_a_name_no_schedule_can_have_is_refused_in_python_and_in_lua(
        rep, redis_client, queue, server_time_ms, name, verb):
    with pytest.raises(ValueError, match="^name must be"):
        getattr(rep, verb)(queue, name, every_ms=60_000, template=TEMPLATE)
    ks = Keyspace(queue)
    args = [name, '{"x":1}', '{"y":1}', 60_000, "", "UTC", "{}", "coalesce", "",
            server_time_ms()]
    with pytest.raises(ValueError, match="^name must be a non-empty string without whitespace"):
        scripts.run(redis_client, f"repeat/{verb}", [ks.repeat, ks.repeat_record(name), ks.beat],
                    args)
    assert snapshot(redis_client, queue_pattern(queue)) == {}
