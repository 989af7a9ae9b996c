"""The payload in a job's row (issue 11, memory): chunks of at most 64 bytes
keep a scheduled job's row a listpack, and the payload comes back byte-exact
whatever its length and wherever a chunk's edge falls in a character
(lua/includes/payload.lua, records.decode_row; docs/protocol.md, "The job row")."""

from __future__ import annotations

import json

import pytest

from echomq_django import Jobs
from echomq_django.admin import reads
from echomq_django.protocol.ids import BrandedId
from echomq_django.protocol.keyspace import Keyspace
from echomq_django.protocol.records import PAYLOAD_FIELDS, decode_row
from tests.state import queue_pattern, snapshot

#: Characters of 1, 2, 3 and 4 bytes of UTF-8.
CHARACTERS = ["a", "é", "€", "😀"]


def text_of(size: int) -> str:
    """JSON text (a string) of exactly ``size`` bytes of UTF-8 (size >= 2),
    multi-byte characters wherever they fit, so chunk edges fall inside them."""
    inner, room, i = [], size - 2, size  # start the cycle at a size-dependent place
    while room:
        char = CHARACTERS[i % 4]
        i += 1
        if len(char.encode()) <= room:
            inner.append(char)
            room -= len(char.encode())
    return '"' + "".join(inner) + '"'


def test_a_scheduled_row_with_a_100_byte_payload_stays_a_listpack(conn, redis_client, queue):
    payload = json.dumps({"job": "benchmarks.jobs.noop", "args": [0, 0, "x" * 42],
                          "kwargs": {}}, separators=(",", ":"))
    assert len(payload) == 100
    jobs = Jobs(conn)
    ks = Keyspace(queue)
    scheduled, pending = BrandedId.generate(), BrandedId.generate()
    assert jobs.enqueue_in(queue, scheduled, payload, 3_600_000) == "scheduled"
    assert jobs.enqueue(queue, pending, payload) == "enqueued"
    assert redis_client.config_get("hash-max-listpack-value") == {"hash-max-listpack-value": "64"}
    for job_id, state in ((scheduled, "scheduled"), (pending, "pending")):
        assert redis_client.object("encoding", ks.job(job_id)) == "listpack"
        row = redis_client.hgetall(ks.job(job_id))
        assert row["payload"] + row["payload.2"] == payload
        assert max(len(value.encode()) for value in row.values()) <= 64
        assert row["state"] == state and "attempts" not in row  # absent: 0
        assert jobs.get(queue, job_id).payload == payload
    assert set(redis_client.hkeys(ks.job(scheduled))) == {
        "state", "payload", "payload.2", "enqueued_at_ms", "run_at_ms"}


def test_every_length_0_to_600_bytes_comes_back_byte_exact(conn, redis_client, queue):
    jobs = Jobs(conn)
    ks = Keyspace(queue)
    with pytest.raises(ValueError, match="payload must be valid JSON"):
        jobs.enqueue(queue, BrandedId.generate(), "")   # 0 bytes is no JSON text
    assert snapshot(redis_client, queue_pattern(queue)) == {}
    sent = {}
    for size in range(1, 601):
        text = "7" if size == 1 else text_of(size)
        assert len(text.encode()) == size
        job_id = BrandedId.generate()
        assert jobs.enqueue(queue, job_id, text) == "enqueued"
        sent[job_id] = text
        assert jobs.get(queue, job_id).payload == text
        # Each chunk is whole characters: a client decoding each value reads
        # the row too, and the raw bytes joined are the payload's bytes.
        shown = redis_client.hgetall(ks.job(job_id))
        assert decode_row(shown)["payload"] == text
        chunks = [shown[name] for name in PAYLOAD_FIELDS if name in shown]
        assert "".join(chunks) == text
        if 64 < size <= 512:
            assert 2 <= len(chunks) <= 9
            assert all(61 <= len(c.encode()) <= 64 for c in chunks[:-1]), size
            assert redis_client.object("encoding", ks.job(job_id)) == "listpack"
        else:
            assert chunks == [text], size
        raw = conn.hgetall(ks.job(job_id))
        assert b"".join(raw[name.encode()] for name in PAYLOAD_FIELDS
                        if name.encode() in raw) == text.encode()
    claimed = {}
    while True:
        got, _ = jobs.claim_many(queue, "w", 60_000, 100)
        if not got:
            break
        claimed.update((c.job_id, c.payload) for c in got)
    assert claimed == sent


def test_a_chunk_cut_inside_a_character_by_another_writer_is_joined_as_bytes(
        conn, queue):
    # Another client may split the bytes anywhere; Python joins them before
    # decoding, so the payload still comes back whole.
    text = '"' + "😀" * 30 + '"'
    data = text.encode()
    job_id = BrandedId.generate()
    conn.hset(Keyspace(queue).job(job_id), mapping={
        "state": "pending", "payload": data[:63], "payload.2": data[63:]})
    assert Jobs(conn).get(queue, job_id).payload == text
    assert decode_row(conn.hgetall(Keyspace(queue).job(job_id)))["payload"] == text


def test_a_payload_past_512_bytes_is_stored_whole(conn, redis_client, queue):
    jobs = Jobs(conn)
    ks = Keyspace(queue)
    for size, chunks in ((512, 9), (513, 1)):
        text = '"' + "😀" * ((size - 2) // 4) + "a" * ((size - 2) % 4) + '"'
        job_id = BrandedId.generate()
        jobs.enqueue(queue, job_id, text)
        names = [n for n in PAYLOAD_FIELDS if redis_client.hexists(ks.job(job_id), n)]
        assert len(names) == chunks and jobs.get(queue, job_id).payload == text


def test_the_admin_reads_the_whole_payload(conn, queue):
    payload = json.dumps({"job": "app.jobs.send", "args": ["é€😀" * 20], "kwargs": {}},
                         ensure_ascii=False)
    assert 64 < len(payload.encode()) <= 300
    job_id = BrandedId.generate()
    Jobs(conn).enqueue_in(queue, job_id, payload, 60_000)
    (row,) = reads.set_page(conn, queue, "schedule").rows
    assert row.payload == payload and row.job == "app.jobs.send"
    assert reads.job_detail(conn, queue, job_id).row.payload == payload
