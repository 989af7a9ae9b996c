"""keyspace: the exact key names, one hash slot per queue, and queue name rules."""

import pytest
from redis.crc import key_slot

from echomq_django.protocol.keyspace import Keyspace
from echomq_django.rules import check_queue_name as validate_queue_name

JOB_ID = "JOB01ARZ3NDEKTSV4RRFFQ69G5FAV"


def _all_keys(ks: Keyspace) -> list[str]:
    return [
        ks.pending, ks.schedule, ks.active, ks.dead, ks.repeat, ks.claims, ks.wake, ks.beat,
        ks.job(JOB_ID), ks.repeat_record("nightly"), ks.lane_pending("tenant-7"),
    ]


def test_exact_key_names():
    ks = Keyspace("mail")
    assert ks.queue == "mail"
    assert ks.base == "emq:{mail}:"
    assert ks.pending == "emq:{mail}:pending"
    assert ks.schedule == "emq:{mail}:schedule"
    assert ks.active == "emq:{mail}:active"
    assert ks.dead == "emq:{mail}:dead"
    assert ks.repeat == "emq:{mail}:repeat"
    assert ks.claims == "emq:{mail}:claims"
    assert ks.wake == "emq:{mail}:wake"
    assert ks.beat == "emq:{mail}:beat"
    assert ks.job(JOB_ID) == f"emq:{{mail}}:job:{JOB_ID}"
    assert ks.repeat_record("nightly") == "emq:{mail}:repeat:nightly"
    assert ks.lane_pending("tenant-7") == "emq:{mail}:g:tenant-7:pending"


def test_every_key_starts_with_the_base():
    ks = Keyspace("a.b_c-9")
    keys = _all_keys(ks)
    assert all(k.startswith(ks.base) for k in keys)
    assert len(set(keys)) == len(keys)


@pytest.mark.parametrize("queue", ["mail", "default", "a", "Q.with_all-chars.09", "x" * 100])
def test_all_keys_of_a_queue_share_one_cluster_hash_slot(queue):
    ks = Keyspace(queue)
    slots = {key_slot(k.encode()) for k in _all_keys(ks)}
    assert slots == {key_slot(queue.encode())}


def test_different_queues_hash_by_their_own_tag():
    # The slot is the tag's, not the whole key's: had the braces been lost,
    # "emq:mail:pending" would land elsewhere.
    assert key_slot(Keyspace("mail").pending.encode()) == key_slot(b"mail")
    assert key_slot(b"emq:mail:pending") != key_slot(b"mail")


def test_a_hundred_characters_is_allowed():
    assert Keyspace("q" * 100).queue == "q" * 100
    assert validate_queue_name("q" * 100) == "q" * 100


RULE = r"queue name must be 1-100 characters of \[A-Za-z0-9._-\]"


@pytest.mark.parametrize(
    "queue",
    ["", "q" * 101, "has space", "br{ace", "br}ace", "col:on", "star*", "ümlaut", "tab\t", "nl\n"],
)
def test_bad_queue_names_raise_value_error_naming_the_rule(queue):
    with pytest.raises(ValueError, match=RULE):
        Keyspace(queue)
    with pytest.raises(ValueError, match=RULE):
        validate_queue_name(queue)


@pytest.mark.parametrize("queue", [None, 7, b"mail", ["mail"]])
def test_a_queue_name_of_another_type_raises_type_error_naming_the_rule(queue):
    rule = r"queue name must be a str of 1-100 characters of \[A-Za-z0-9._-\]"
    with pytest.raises(TypeError, match=rule):
        Keyspace(queue)
    with pytest.raises(TypeError, match=rule):
        validate_queue_name(queue)
