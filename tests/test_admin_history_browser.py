"""The archive's history in a real browser (Playwright driving Debian's
chromium; see tests/test_admin_browser.py for the set-up and its skips):
from a queue's live page to its history, filter by state, search by
argument text, open a record and read each attempt's error."""

from __future__ import annotations

import re

import pytest

from tests.test_admin_browser import (  # noqa: F401  (fixtures, shared)
    ARTIFACTS, browser, browser_page, log_in, pytestmark)
from tests.test_admin_history import archive_some

try:
    from playwright.sync_api import expect
except ImportError:  # pragma: no cover - skipped by pytestmark then
    expect = None


@pytest.fixture
def history_login(transactional_db, django_user_model):
    from django.contrib.auth.models import Permission

    user = django_user_model.objects.create_user(username="auditor", password="audit-pass-1",
                                                 is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="echomq_django", codename__in=["view_queue",
                                                                "view_jobrecord"]))
    return "auditor", "audit-pass-1"


def test_history_from_the_live_page_filtered_searched_and_opened(
        live_server, history_login, browser_page, conn, queue):
    page = browser_page
    ids = archive_some(conn, queue)
    archive_some(conn, queue + "-other")
    log_in(page, live_server, *history_login)
    page.goto(f"{live_server.url}/admin/echomq_django/queue/{queue}/pending/")
    page.click("#emq-history")
    rows = page.locator("#result_list tbody tr")
    expect(rows).to_have_count(3)
    for job_id in ids.values():
        expect(page.locator("#result_list")).to_contain_text(job_id)

    # Filter by state: Django's own sidebar filter.
    page.locator("#changelist-filter").get_by_role("link", name="dead", exact=True).click()
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text(ids["dead"])
    page.screenshot(path=str(ARTIFACTS / "admin-history-dead.png"), full_page=True)

    # Search by argument text within the queue's history.
    page.goto(f"{live_server.url}/admin/echomq_django/jobrecord/?queue__exact={queue}")
    page.fill("#searchbar", "never sent")
    page.press("#searchbar", "Enter")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text(ids["cancelled"])
    expect(rows.first).to_contain_text("cancelled")

    # The dead record's page: every attempt's error, its traceback on demand.
    page.fill("#searchbar", ids["dead"])
    page.press("#searchbar", "Enter")
    page.locator("#result_list tbody tr th a").first.click()
    attempts = page.locator("tr.emq-attempt")
    expect(attempts).to_have_count(2)
    expect(attempts.nth(0)).to_contain_text("ValueError: 503 call 1")
    expect(attempts.nth(1)).to_contain_text("ValueError: 503 call 2")
    attempts.nth(1).locator("summary").click()
    expect(attempts.nth(1).locator("pre.emq-traceback")).to_contain_text(
        re.compile(r"Traceback \(most recent call last\)"))
    expect(page.locator('input[name="_save"]')).to_have_count(0)
    page.screenshot(path=str(ARTIFACTS / "admin-history-record.png"), full_page=True)
