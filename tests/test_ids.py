"""ids: branded, mint-ordered ids (shape, reading, order within and across processes)."""

import os
import re
import select
import signal
import subprocess
import sys
import threading
import time

import pytest

from echomq_django.protocol.ids import BrandedId

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
SHAPE = re.compile(r"JOB[0-9A-HJKMNP-TV-Z]{26}")


def test_generate_is_prefix_plus_26_crockford_chars():
    job_id = BrandedId.generate("JOB")
    assert SHAPE.fullmatch(job_id), job_id
    assert len(job_id) == 29
    assert all(c in CROCKFORD for c in job_id[3:])


def test_generate_defaults_to_job_namespace():
    assert BrandedId.namespace(BrandedId.generate()) == "JOB"


@pytest.mark.parametrize("namespace", ["JOB", "USR", "NOT", "A", "ABCDEFGHIJKLMNOP"])
def test_namespace_reads_back_the_prefix(namespace):
    branded = BrandedId.generate(namespace)
    assert BrandedId.namespace(branded) == namespace
    assert len(branded) == len(namespace) + 26


def test_timestamp_ms_is_the_mint_time(monkeypatch):
    # A test run earlier in this process may have minted JOB ids on a skewed
    # clock (tests/test_jobs.py skews it); mint order would keep that time.
    monkeypatch.setattr(BrandedId, "_last", {})
    before = time.time_ns() // 1_000_000
    branded = BrandedId.generate("JOB")
    after = time.time_ns() // 1_000_000
    # The mint clock may already be ahead by the in-millisecond counter's carry,
    # never behind the wall clock read before minting.
    assert before <= BrandedId.timestamp_ms(branded) <= after + 1


def test_timestamp_ms_decodes_a_known_id():
    # 10 Crockford chars "0000000001" = 1 ms, "000000000Z" = 31 ms, "0000000010" = 32 ms.
    assert BrandedId.timestamp_ms("JOB0000000001" + "0" * 16) == 1
    assert BrandedId.timestamp_ms("JOB000000000Z" + "0" * 16) == 31
    assert BrandedId.timestamp_ms("JOB0000000010" + "0" * 16) == 32
    assert BrandedId.timestamp_ms("USR01ARZ3NDEK" + "TSV4RRFFQ69G5FAV") == 1469922850259


def test_ten_thousand_ids_in_a_tight_loop_are_strictly_increasing_in_byte_order():
    ids = [BrandedId.generate("JOB") for _ in range(10_000)]
    encoded = [i.encode("ascii") for i in ids]
    for earlier, later in zip(encoded, encoded[1:]):
        assert earlier < later
    assert len(set(ids)) == 10_000
    # Many share a millisecond, so the in-millisecond counter is what orders them.
    assert len({BrandedId.timestamp_ms(i) for i in ids}) < 10_000


def test_ids_minted_by_two_threads_at_once_are_all_unique():
    per_thread = 5_000
    results: list[list[str]] = [[], []]
    start = threading.Barrier(2)

    def mint(slot):
        start.wait()
        results[slot].extend(BrandedId.generate("JOB") for _ in range(per_thread))

    threads = [threading.Thread(target=mint, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = results[0] + results[1]
    assert len(everything) == 2 * per_thread
    assert len(set(everything)) == 2 * per_thread
    # Each thread's own sequence still follows its mint order.
    for seq in results:
        assert seq == sorted(seq)


_MINT = (
    "import sys, time\n"
    "from echomq_django.protocol.ids import BrandedId\n"
    "print('\\n'.join(BrandedId.generate('JOB') for _ in range(200)))\n"
)


def _mint_in_subprocess() -> list[str]:
    out = subprocess.run([sys.executable, "-c", _MINT], check=True, capture_output=True,
                         text=True, timeout=60).stdout.split()
    assert len(out) == 200
    return out


def test_ids_from_separate_processes_follow_millisecond_order():
    first = _mint_in_subprocess()
    # Make sure the second process starts minting in a later millisecond.
    last_ms = BrandedId.timestamp_ms(first[-1])
    while time.time_ns() // 1_000_000 <= last_ms + 2:
        time.sleep(0.002)
    second = _mint_in_subprocess()
    assert BrandedId.timestamp_ms(first[-1]) < BrandedId.timestamp_ms(second[0])
    assert max(first) < min(second)
    assert first + second == sorted(first + second)


@pytest.mark.parametrize("namespace", ["", "job", "J0B", "JOB-", "ABCDEFGHIJKLMNOPQ", "É", None, 3, b"JOB"])
def test_bad_namespace_raises_value_error(namespace):
    with pytest.raises(ValueError, match="namespace must be 1-16 upper-case letters"):
        BrandedId.generate(namespace)


# -- an explicit mint time (the server's) ---------------------------------------


def test_the_time_part_is_the_given_now_ms(monkeypatch):
    monkeypatch.setattr(BrandedId, "_last", {})
    now = time.time_ns() // 1_000_000 + 3_600_000  # an hour from this host's now
    assert BrandedId.timestamp_ms(BrandedId.generate("JOB", now)) == now


def test_a_mint_time_that_moves_back_keeps_mint_order(monkeypatch):
    # The offset to the server's clock may shrink between two mints: the
    # process keeps its last time and counts up, as for a clock step back.
    monkeypatch.setattr(BrandedId, "_last", {})
    now = time.time_ns() // 1_000_000 + 3_600_000
    ids = [BrandedId.generate("JOB", now), BrandedId.generate("JOB", now - 1_000),
           BrandedId.generate("JOB"), BrandedId.generate("JOB", now + 1)]
    assert ids == sorted(ids) and len(set(ids)) == 4
    assert [BrandedId.timestamp_ms(i) for i in ids] == [now, now, now, now + 1]


def test_each_namespace_keeps_its_own_order(monkeypatch):
    # A host-clock mint an hour ahead in one namespace holds no other's ids.
    monkeypatch.setattr(BrandedId, "_last", {})
    now = time.time_ns() // 1_000_000
    ahead = BrandedId.generate("USR", now + 3_600_000)
    assert BrandedId.timestamp_ms(BrandedId.generate("JOB", now)) == now
    assert BrandedId.timestamp_ms(BrandedId.generate("USR", now)) == now + 3_600_000
    assert BrandedId.generate("USR") > ahead


@pytest.mark.parametrize("now_ms, error", [(-1, ValueError), (1 << 48, ValueError),
                                           (1.5e12, TypeError), ("1", TypeError),
                                           (True, TypeError)])
def test_bad_now_ms_raises(now_ms, error):
    with pytest.raises(error, match="now_ms"):
        BrandedId.generate("JOB", now_ms)


GOOD = "JOB01ARZ3NDEKTSV4RRFFQ69G5FAV"


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "JOB",
        "01ARZ3NDEKTSV4RRFFQ69G5FAV",          # no namespace
        "job01ARZ3NDEKTSV4RRFFQ69G5FAV",       # lower-case namespace
        "JOB01ARZ3NDEKTSV4RRFFQ69G5FAI",       # I is not Crockford
        "JOB01ARZ3NDEKTSV4RRFFQ69G5FAU",       # U is not Crockford
        "JOB01arz3ndektsv4rrffq69g5fav",       # lower-case suffix
        "JOB-01ARZ3NDEKTSV4RRFFQ69G5FAV",
        None,
        42,
        GOOD.encode(),
    ],
)
def test_bad_ids_raise_value_error(bad):
    with pytest.raises(ValueError, match="not a branded id"):
        BrandedId.namespace(bad)
    with pytest.raises(ValueError, match="not a branded id"):
        BrandedId.timestamp_ms(bad)


def test_good_id_reads():
    assert BrandedId.namespace(GOOD) == "JOB"


def test_the_suffix_is_always_the_last_26_characters():
    # One character short, 'B' (a Crockford digit) joins the suffix and the
    # namespace reads "JO": the suffix is positional, not found by a search.
    assert BrandedId.namespace(GOOD[:-1]) == "JO"


# -- fork ------------------------------------------------------------------


def _fork_a_minter():
    """Fork a child that mints one id and writes it (or its error) to a pipe;
    return ``(pid, read_fd)``. The child never returns into pytest."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read_fd)
            os.write(write_fd, BrandedId.generate("JOB").encode())
            code = 0
        except BaseException as exc:  # noqa: BLE001 - any failure goes through the pipe
            os.write(write_fd, repr(exc).encode())
        finally:
            os._exit(code)
    os.close(write_fd)
    return pid, read_fd


def _collect(pid, read_fd, timeout_s=10.0):
    """The child's report, or None (and the child killed) if it hangs."""
    ready, _, _ = select.select([read_fd], [], [], timeout_s)
    if not ready:
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    with os.fdopen(read_fd) as fh:
        return fh.read() if ready else None


def test_a_forked_child_never_mints_its_parents_next_id():
    for _ in range(200):
        # Hold the generator in one millisecond for the whole trial, as after
        # the wall clock stepped back a second: both processes then mint in
        # the same millisecond however long the fork takes, which is the
        # window where an inherited counter collides.
        with BrandedId._lock:
            BrandedId._last["JOB"] = (time.time_ns() // 1_000_000 + 1_000, 0)
        held_ms = BrandedId._last["JOB"][0]
        pid, read_fd = _fork_a_minter()
        mine = BrandedId.generate("JOB")
        theirs = _collect(pid, read_fd)
        assert theirs and SHAPE.fullmatch(theirs), theirs
        assert BrandedId.timestamp_ms(mine) == held_ms
        assert theirs != mine


def test_a_child_forked_while_the_lock_is_held_can_mint():
    # A thread that holds the generator's lock at fork time copies a held
    # lock into the child, which must get a fresh one.
    with BrandedId._lock:
        pid, read_fd = _fork_a_minter()
    theirs = _collect(pid, read_fd, timeout_s=5.0)
    assert theirs is not None, "the child waited forever on the parent's lock"
    assert SHAPE.fullmatch(theirs), theirs
