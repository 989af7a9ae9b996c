"""The admin for operators in a real browser (Playwright driving Debian's
chromium; tests/test_admin_browser.py has the set-up and its skips): the
overview's last-hour charts answer a hover with that minute's values, a
running job's progress bar, a search by function and a lane filter with
what was searched said in words, the state filter, and every attempt's
traceback unfolded and kept open across the live refresh.

Screenshots go to ``artifacts/``; with ``ECHOMQ_DOCS_SCREENSHOT=1`` they are
copied to ``docs/img/`` as well (docs/admin.md shows them).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from echomq_django import Jobs
from echomq_django.protocol.ids import BrandedId
from echomq_django.protocol.keyspace import Keyspace
from echomq_django.protocol.records import Finish
from tests.test_admin_browser import (ARTIFACTS, browser, browser_page, log_in,  # noqa: F401
                                      pytestmark, staff_login)

try:
    from playwright.sync_api import expect
except ImportError:  # pragma: no cover - skipped by pytestmark then
    expect = None

DOCS_IMG = Path(__file__).resolve().parent.parent / "docs" / "img"
TB = ("Traceback (most recent call last):\n  File \"/srv/app/notify/jobs.py\", line 41, in deliver\n"
      "    response.raise_for_status()\n{cls}: {msg}\n")


def _shot(page, name: str, full_page: bool = True) -> None:
    page.screenshot(path=str(ARTIFACTS / name), full_page=full_page)
    if os.environ.get("ECHOMQ_DOCS_SCREENSHOT"):
        shutil.copyfile(ARTIFACTS / name, DOCS_IMG / name)


def _call(path, *args, **kwargs):
    return json.dumps({"job": path, "args": list(args), "kwargs": kwargs})


def _last_hour(redis_client, queue, now_minute):
    """An hour of per-minute counters and latency samples, as the scripts
    and the metronome write them."""
    ks = Keyspace(queue)
    pipe = redis_client.pipeline(transaction=False)
    for back in range(60):
        m = now_minute - back
        wave = (m * 37) % 11
        pipe.set(ks.stats("done", m), 40 + wave * 6, px=7_200_000)
        pipe.set(ks.stats("failed", m), 2 + wave % 4 + (6 if back in (17, 18) else 0), px=7_200_000)
        pipe.set(ks.stats("dead", m), 1 if back % 9 == 0 else 0, px=7_200_000)
        if back not in (41, 42):     # a metronome restart: two minutes without a sample
            latency = 9_500 if back in (17, 18, 19) else 300 + wave * 90
            pipe.zadd(ks.latency, {f"{m}:{latency}": m})
    pipe.execute()


def test_charts_hover_progress_search_filter_and_attempts(
        live_server, staff_login, browser_page, conn, redis_client, queue, settings):
    page = browser_page
    settings.ECHOMQ = {**settings.ECHOMQ, "QUEUES": [queue]}
    jobs = Jobs(conn)
    now_minute = int(redis_client.time()[0]) // 60
    _last_hour(redis_client, queue, now_minute)
    # Known values in one minute, to read back on hover.
    ks = Keyspace(queue)
    redis_client.set(ks.stats("done", now_minute - 5), 123)
    redis_client.set(ks.stats("failed", now_minute - 5), 7)
    redis_client.set(ks.stats("dead", now_minute - 5), 2)
    # A running job with progress; one that failed three times, then died.
    export = BrandedId.generate()
    jobs.enqueue(queue, export, _call("app.reports.export_month", "2026-11"))
    running = jobs.claim(queue, "web-1:4242", 300_000)
    jobs.progress(queue, export, running.token, 42, "rows 4,200 of 10,000")
    doomed = BrandedId.generate()
    jobs.enqueue(queue, doomed, _call("app.notify.deliver", "chat-9", "Round over"),
                 group="chat-9")
    for n, (cls, msg) in enumerate([("requests.exceptions.ReadTimeout", "read timed out"),
                                    ("requests.exceptions.HTTPError", "502 Bad Gateway")], 1):
        claim = jobs.claim(queue, f"worker-{n}:31{n}", 60_000)
        jobs.finish_many(queue, [Finish("retry", claim.job_id, claim.token, delay_ms=0,
                                        error=TB.format(cls=cls, msg=msg), error_class=cls)])
        jobs.promote(queue)
    claim = jobs.claim(queue, "worker-3:313", 60_000)
    jobs.finish_many(queue, [Finish("dead", claim.job_id, claim.token, reason="failed",
                                    error=TB.format(cls="requests.exceptions.HTTPError",
                                                    msg="503 Service Unavailable"),
                                    error_class="requests.exceptions.HTTPError")])
    # The schedule: many sends, a few deliveries to two chats.
    for i in range(40):
        jobs.enqueue_in(queue, BrandedId.generate(), _call("app.mail.send_welcome", i),
                        60_000 + i * 1000)
    delivers = {}
    for chat in ("chat-9", "chat-1", "chat-9"):
        job_id = BrandedId.generate()
        jobs.enqueue_in(queue, job_id, _call("app.notify.deliver", chat, "Your turn"),
                        90_000, group=chat)
        delivers.setdefault(chat, []).append(job_id)

    log_in(page, live_server, *staff_login)
    page.goto(f"{live_server.url}/admin/echomq_django/queue/")

    # The overview: the hour's totals, and the charts answer a hover.
    row = page.locator(f'tr[data-queue="{queue}"]')
    expect(row.locator('[data-total="dead"]')).to_contain_text("dead")
    charts = page.locator(f'section#emq-charts-{queue}')
    hit = charts.locator(f'[data-chart="throughput"] rect.emq-hit[data-minute="{now_minute - 5}"]')
    hit.hover()
    tip = charts.locator('[data-chart="throughput"] .emq-tip')
    expect(tip).to_be_visible()
    expect(tip).to_contain_text("123 done · 7 failed attempts · 2 dead")
    expect(hit).to_have_class("emq-hit emq-hover")
    box = charts.locator('[data-chart="throughput"] svg').bounding_box()
    assert box["width"] > 1000          # full width at 1400 px, not 240 px
    lat = charts.locator(f'[data-chart="latency"] rect.emq-hit[data-minute="{now_minute - 18}"]')
    lat.hover()
    expect(charts.locator('[data-chart="latency"] .emq-tip')).to_contain_text("latency 9.5 s")
    # The hover survives the live refresh (the fragment is swapped every 2 s).
    page.wait_for_function("document.getElementById('emq-live-stamp').textContent"
                           ".startsWith('updated 0 s')", timeout=10_000)
    page.wait_for_timeout(2500)
    expect(charts.locator('[data-chart="latency"] .emq-tip')).to_contain_text("latency 9.5 s")
    charts.locator('[data-chart="throughput"] rect.emq-hit[data-minute="%d"]'
                   % (now_minute - 5)).hover()
    _shot(page, "admin-overview.png")

    # The active list: a progress bar.
    page.goto(f"{live_server.url}/admin/echomq_django/queue/{queue}/active/")
    bar = page.locator(f'tr[data-job="{export}"] [role="progressbar"]')
    expect(bar).to_have_attribute("aria-valuenow", "42")
    width = bar.locator(".emq-progress-fill").evaluate("el => el.getBoundingClientRect().width")
    whole = bar.evaluate("el => el.clientWidth")
    assert abs(width / whole - 0.42) < 0.03, (width, whole)
    expect(page.locator(f'tr[data-job="{export}"] .emq-progress-text')).to_contain_text(
        "42% · rows 4,200 of 10,000")
    _shot(page, "admin-active-progress.png", full_page=False)

    # Search the schedule by function, then filter by lane.
    page.goto(f"{live_server.url}/admin/echomq_django/queue/{queue}/schedule/")
    page.fill("#emq-f-function", "notify.deliver")
    page.click("#emq-f-submit")
    expect(page.locator("#emq-searched")).to_contain_text(
        "Searched the first 43 of 43 jobs in schedule (soonest run-at first): 3 matches")
    rows = page.locator("#emq-rows tbody tr")
    expect(rows).to_have_count(3)
    page.fill("#emq-f-lane", "chat-9")
    page.click("#emq-f-submit")
    expect(page.locator("#emq-searched")).to_contain_text("2 matches")
    expect(page.locator("#emq-searched")).to_contain_text("lane chat-9")
    assert rows.evaluate_all("rows => rows.map(r => r.dataset.job)") == delivers["chat-9"]
    _shot(page, "admin-search.png")

    # The state filter: the same search on dead.
    page.select_option("#emq-f-state", "dead")
    page.click("#emq-f-submit")
    expect(page.locator("#emq-rows")).to_have_attribute("data-set", "dead")
    expect(page.locator("#emq-searched")).to_contain_text("Searched the newest 1 of 1 jobs in dead")
    expect(rows).to_have_count(1)

    # The job page: every attempt; a traceback unfolds and stays open.
    rows.first.locator("th a").first.click()
    attempts = page.locator("#emq-attempts tbody tr")
    expect(attempts).to_have_count(3)
    expect(attempts.nth(1)).to_contain_text("worker-2:312")
    expect(attempts.nth(1)).to_contain_text("requests.exceptions.HTTPError: 502 Bad Gateway")
    page.click("#emq-attempt-2-traceback summary")
    expect(page.locator("#emq-attempt-2-traceback pre")).to_be_visible()
    page.wait_for_timeout(2500)         # a live refresh or more
    expect(page.locator("#emq-attempt-2-traceback pre")).to_be_visible()
    _shot(page, "admin-job-attempts.png")
