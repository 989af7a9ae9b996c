"""The admin dashboard in a real browser: Playwright driving Debian's chromium.

Log in as staff, open the dashboard, schedule a job through ``@job`` and see
it appear in the schedule list without a reload, press "Run now", and see it
leave the schedule and end done (a real ``runechomq`` subprocess runs it);
open a queue's lanes, see their states and a new lane arrive live, and open
one lane's pending jobs.
Screenshots go to ``artifacts/`` (ignored by git).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from echomq_django import BrandedId, Jobs
from echomq_django.protocol.keyspace import Keyspace
from tests.procs import runechomq, stop, wait_for
from tests.testapp import jobs as testjobs

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # pragma: no cover - depends on the environment
    sync_playwright = None

if sync_playwright is None:
    MISSING = "playwright is not installed (pip install playwright)"
elif not os.path.exists(CHROMIUM):
    MISSING = f"{CHROMIUM} is missing (apt-get install chromium)"
else:
    MISSING = ""
# CI sets ECHOMQ_REQUIRE_BROWSER=1: there a missing browser fails the test
# instead of skipping it.
REQUIRED = bool(os.environ.get("ECHOMQ_REQUIRE_BROWSER"))

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(bool(MISSING) and not REQUIRED, reason=MISSING),
]


@pytest.fixture
def staff_login(transactional_db, django_user_model):
    from django.contrib.auth.models import Permission

    user = django_user_model.objects.create_user(username="ops", password="ops-pass-1",
                                                 is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="echomq_django", codename__in=["view_queue", "change_queue"]))
    return "ops", "ops-pass-1"


@pytest.fixture(scope="module")
def browser():
    """One chromium for the module's tests (launching it costs about a second);
    each test gets a fresh context (no cookies, storage or cache shared)."""
    if MISSING:
        pytest.fail(f"ECHOMQ_REQUIRE_BROWSER is set but {MISSING}")
    # Playwright's sync API runs an event loop in this thread; the ORM is not
    # used once it runs, but Django's guard would refuse even the teardown (the
    # test database's flush after each test, while the browser is still up).
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        ARTIFACTS.mkdir(exist_ok=True)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                yield browser
            finally:
                browser.close()


@pytest.fixture
def browser_page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        page = context.new_page()
        page.set_default_timeout(20_000)
        yield page
    finally:
        context.close()


def log_in(page, live_server, username, password):
    """Log in through the admin's own form."""
    page.goto(f"{live_server.url}/admin/login/?next=/admin/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    expect(page.locator("#content")).to_contain_text("EchoMQ")


def test_the_dead_list_fits_a_1280_px_window(live_server, staff_login, browser_page, conn,
                                             queue):
    page = browser_page
    page.set_viewport_size({"width": 1280, "height": 800})
    jobs = Jobs(conn)
    url = "https://api.example.org/bot" + "A1b2C3d4" * 12 + "/sendMessage?chat_id=" + "9" * 40
    error = ("Traceback (most recent call last):\n  File \"jobs.py\", line 9, in deliver\n"
             f"requests.exceptions.HTTPError: 503 Server Error: Service Unavailable for url: {url}")
    payload = json.dumps({"job": "example_project.notifications.jobs.deliver_standings_digest",
                          "args": ["chat-" + "7" * 80, "x" * 200],
                          "kwargs": {"fail_first": 3, "template": "standings_" * 20}})
    job_id = BrandedId.generate()
    jobs.enqueue(queue, job_id, payload)
    claim = jobs.claim(queue, "a-rather-long-hostname.example.internal:123456", 60_000)
    jobs.dead(queue, claim.job_id, claim.token, "failed", error)
    log_in(page, live_server, *staff_login)
    page.goto(f"{live_server.url}/admin/echomq_django/queue/{queue}/dead/")
    row = page.locator(f'#emq-rows tr[data-job="{job_id}"]')
    expect(row).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "admin-dead-1280.png"), full_page=True)
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    # The cut text is whole in the cell's title.
    expect(row.locator(".emq-error")).to_have_attribute("title", re.compile("chat_id=9+$"))
    expect(row.locator('button[data-action="retry"]')).to_be_visible()


def test_schedule_appears_live_then_run_now_makes_it_done(
        live_server, staff_login, browser_page, conn, queue, worker_procs):
    page = browser_page
    username, password = staff_login
    jobs = Jobs(conn)
    proc = runechomq(queue, "--concurrency", "2")
    worker_procs.append(proc)

    # Some history for the overview: done and failed jobs, a few scheduled.
    warm = [testjobs.add.using(queue=queue).enqueue(i, i) for i in range(5)]
    bad = testjobs.always_fails.using(queue=queue).enqueue(f"{queue}:bad")
    for minutes in (3, 7, 8, 22, 41):
        testjobs.add.using(queue=queue).enqueue_in(dt.timedelta(minutes=minutes), 0, minutes)
    wait_for(lambda: all(jobs.get(queue, h.job_id).state == "done" for h in warm)
             and jobs.get(queue, bad.job_id).state == "dead", timeout=30)

    log_in(page, live_server, username, password)
    page.click('a[href="/admin/echomq_django/queue/"]')
    row = page.locator(f'tr[data-queue="{queue}"]')
    expect(row).to_be_visible()
    expect(page.locator(f'#emq-workers tr[data-worker*=":{proc.pid}"]')).to_be_visible()
    expect(row.locator('[data-set="dead"]')).to_have_text("1")
    expect(page.locator("#emq-live-stamp")).to_contain_text("updated")
    page.screenshot(path=str(ARTIFACTS / "admin-overview.png"), full_page=True)

    # The schedule list, then a job scheduled from here appears without a reload.
    row.locator('[data-set="schedule"] a').click()
    expect(page.locator("#emq-rows")).to_have_attribute("data-set", "schedule")
    page.evaluate("window.__sameDocument = 'yes'")
    handle = testjobs.add.using(queue=queue).enqueue_in(dt.timedelta(hours=1), 20, 22)
    job_row = page.locator(f'#emq-rows tr[data-job="{handle.job_id}"]')
    expect(job_row).to_be_visible(timeout=10_000)
    expect(job_row.locator(".emq-due")).to_contain_text("in 59 min")
    assert page.evaluate("window.__sameDocument") == "yes"  # no reload happened
    page.screenshot(path=str(ARTIFACTS / "admin-schedule.png"), full_page=True)

    # The pause toggle stops the refresh; the stamp says so.
    page.click("#emq-live-toggle")
    expect(page.locator("#emq-live-stamp")).to_contain_text("(paused)")
    page.click("#emq-live-toggle")
    expect(page.locator("#emq-live-stamp")).not_to_contain_text("(paused)")

    # Run now: a POST with the CSRF token; the admin says what it did.
    job_row.locator('button[data-action="run_now"]').click()
    expect(page.locator("ul.messagelist")).to_contain_text(
        f"Job {handle.job_id} moved from schedule to pending")
    expect(page.locator(f'#emq-rows tr[data-job="{handle.job_id}"]')).to_have_count(0)
    assert conn.zscore(Keyspace(queue).schedule, handle.job_id) is None

    # The job page shows it done, with its result, once the worker ran it.
    page.goto(f"{live_server.url}/admin/echomq_django/queue/{queue}/job/{handle.job_id}/")
    expect(page.locator("#emq-job-state")).to_have_text("done", timeout=15_000)
    expect(page.locator("#emq-result")).to_have_text("42")
    page.screenshot(path=str(ARTIFACTS / "admin-job.png"), full_page=True)
    assert jobs.get(queue, handle.job_id).result_value == 42

    code, out = stop(proc)
    assert code == 0, out
    if os.environ.get("ECHOMQ_DOCS_SCREENSHOT"):
        target = Path(__file__).resolve().parent.parent / "docs" / "img" / "admin-overview.png"
        shutil.copyfile(ARTIFACTS / "admin-overview.png", target)


def test_the_lanes_page_shows_each_lanes_state_live_and_opens_its_jobs(
        live_server, staff_login, browser_page, conn, queue):
    page = browser_page
    page.set_viewport_size({"width": 1280, "height": 800})
    jobs = Jobs(conn)
    payload = json.dumps({"job": "tests.testapp.jobs.add", "args": [1, 2], "kwargs": {}})
    jobs.set_limits(queue, lane_concurrency=1, lane_rate=(1, 60_000))
    ids = {}
    for chat, n in (("chat-1", 4), ("chat-2", 3)):
        for priority in range(n):
            ids[chat, priority] = BrandedId.generate()
            jobs.enqueue(queue, ids[chat, priority], payload, group=chat, priority=priority)
    claims, _ = jobs.claim_many(queue, "host:1", 60_000, 2)
    assert [c.group for c in claims] == ["chat-1", "chat-2"]
    jobs.ack(queue, claims[0].job_id, claims[0].token)
    # chat-1 has spent its token, chat-2 runs its one: nothing to claim.
    assert jobs.claim(queue, "host:1", 60_000) is None
    jobs.enqueue(queue, BrandedId.generate(), payload, group="chat-3")

    log_in(page, live_server, *staff_login)
    page.goto(f"{live_server.url}/admin/echomq_django/queue/{queue}/pending/")
    page.click('a.emq-tab[data-set="lanes"]')
    lanes = page.locator("#emq-lanes tbody tr")
    expect(lanes).to_have_count(3)
    assert lanes.evaluate_all("rows => rows.map(r => r.dataset.lane)") == [
        "chat-1", "chat-2", "chat-3"]                    # busiest first
    state = 'td[data-col="state"]'
    expect(page.locator(f'tr[data-lane="chat-1"] {state}')).to_contain_text("rate-limited until")
    expect(page.locator(f'tr[data-lane="chat-1"] {state}')).to_contain_text(
        re.compile(r"in (\d+ s|1 min)"))
    expect(page.locator(f'tr[data-lane="chat-2"] {state}')).to_contain_text("at cap")
    expect(page.locator(f'tr[data-lane="chat-2"] td[data-col="running"]')).to_have_text("1")
    expect(page.locator(f'tr[data-lane="chat-3"] {state}')).to_contain_text("ready")

    # A busier lane appears at the top without a reload.
    page.evaluate("window.__sameDocument = 'yes'")
    for _ in range(5):
        jobs.enqueue(queue, BrandedId.generate(), payload, group="chat-4")
    expect(lanes.first).to_have_attribute("data-lane", "chat-4", timeout=10_000)
    assert page.evaluate("window.__sameDocument") == "yes"
    page.screenshot(path=str(ARTIFACTS / "admin-lanes.png"), full_page=True)
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280

    # A lane's link opens its pending jobs, highest priority first.
    page.click('tr[data-lane="chat-1"] th a')
    expect(page.locator("#emq-lane")).to_have_text("chat-1")
    rows = page.locator("#emq-rows tbody tr")
    expect(rows).to_have_count(3)
    # (The claim above took its priority-3 job.)
    assert claims[0].job_id == ids["chat-1", 3]
    assert rows.evaluate_all("rows => rows.map(r => r.dataset.job)") == [
        ids["chat-1", 2], ids["chat-1", 1], ids["chat-1", 0]]
    expect(rows.first.locator('td[data-col="priority"]')).to_have_text("2")
    page.screenshot(path=str(ARTIFACTS / "admin-lane-pending.png"), full_page=True)


def test_a_server_that_stops_answering_is_said_and_the_page_comes_back_by_itself(
        live_server, staff_login, browser_page, start_valkey, queue):
    """SIGKILL the server under an open page: its stamp says the server is not
    answering while it keeps what it showed; a page opened meanwhile is the
    503 stand-in; once the server is back both carry on without a click."""
    from django.test import override_settings

    page = browser_page
    url, proc = start_valkey()
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    with override_settings(ECHOMQ={"URL": url, "QUEUES": [queue]}):
        log_in(page, live_server, *staff_login)
        page.goto(f"{live_server.url}/admin/echomq_django/queue/")
        row = page.locator(f'#emq-queues tr[data-queue="{queue}"]')
        expect(row).to_be_visible()
        stamp = page.locator("#emq-live-stamp")

        proc.kill()
        proc.wait()
        expect(stamp).to_contain_text("the EchoMQ server is not answering")
        expect(row).to_be_visible()  # the last answer stays on the page
        other = page.context.new_page()
        other.set_default_timeout(20_000)
        answer = other.goto(f"{live_server.url}/admin/echomq_django/queue/{queue}/lanes/")
        assert answer.status == 503
        expect(other.locator("#emq-unavailable")).to_contain_text(url)
        expect(other.locator("#emq-live-stamp")).to_contain_text("not answering")
        other.screenshot(path=str(ARTIFACTS / "admin-server-down.png"), full_page=True)
        # A stand-in whose page will not answer 200 once the server is back:
        # the job is gone with the killed server (404).
        gone = page.context.new_page()
        gone.set_default_timeout(20_000)
        job_id = BrandedId.generate()
        assert gone.goto(f"{live_server.url}/admin/echomq_django/queue/{queue}/job/"
                         f"{job_id}/").status == 503

        start_valkey(port=port)
        expect(stamp).not_to_contain_text("not answering")
        expect(row).to_be_visible()
        # The stand-in loads the real page by itself.
        expect(other.locator("#emq-unavailable")).to_have_count(0)
        expect(other.locator("#emq-live")).to_be_visible()
        expect(other).to_have_title(re.compile(queue))
        expect(gone.locator("#emq-unavailable")).to_have_count(0)
        expect(gone.locator("body")).to_contain_text("Not Found")
