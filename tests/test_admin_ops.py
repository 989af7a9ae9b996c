"""The admin for operators (issue 14, item 3), through Django's test client:
a running job's progress bar in the active list and on its page; every
attempt's worker and error on the job page; search and filters over a live
set, bounded (a window of the set, said in words), and the link to the
archive with the same filters. The browser side is tests/test_admin_ops_browser.py."""

from __future__ import annotations

import json
import re
from urllib.parse import parse_qs, urlsplit

import pytest

from echomq_django import Jobs
from echomq_django.admin.job_page import attempts
from echomq_django.admin.reads.search import SEARCH_WINDOW, Filters, search_page
from echomq_django.protocol import scripts
from echomq_django.protocol.ids import BrandedId
from echomq_django.protocol.keyspace import Keyspace
from echomq_django.protocol.records import Finish
from tests import nodes
from tests.test_admin import (ADMIN, configured, job_url, make_staff, set_url,  # noqa: F401
                              viewer)

pytestmark = pytest.mark.django_db


def call(path, *args, **kwargs):
    return json.dumps({"job": path, "args": list(args), "kwargs": kwargs})


TB = ("Traceback (most recent call last):\n  File \"jobs.py\", line 3, in deliver\n"
      "    raise {cls}('{msg}')\n{cls}: {msg}\n")


def test_running_jobs_show_a_progress_bar_in_the_active_list_and_on_their_page(
        viewer, conn, queue):
    jobs = Jobs(conn)
    ids = [BrandedId.generate() for _ in range(2)]
    for job_id in ids:
        jobs.enqueue(queue, job_id, call("app.jobs.export", 1))
    first = jobs.claim(queue, "host-a:1", 60_000)
    jobs.claim(queue, "host-a:1", 60_000)
    jobs.progress(queue, first.job_id, first.token, 42, "rows 420 of 1000")
    text = viewer.get(set_url(queue, "active")).content.decode()
    row = re.search(rf'<tr data-job="{first.job_id}">(.*?)</tr>', text, re.S).group(1)
    assert 'role="progressbar"' in row and 'aria-valuenow="42"' in row
    assert 'style="width: 42%"' in row and "42% · " in row and "rows 420 of 1000" in row
    other = re.search(rf'<tr data-job="{ids[1]}">(.*?)</tr>', text, re.S).group(1)
    assert "no progress reported" in other
    page = viewer.get(job_url(queue, first.job_id)).content.decode()
    bar = re.search(r'<div id="emq-job-progress">(.*?)</div>\s*<h2>', page, re.S).group(1)
    assert 'aria-valuenow="42"' in bar and "emq-progress-big" in bar and "reported" in bar


def test_the_job_page_lists_every_attempt_with_its_worker_and_error(viewer, conn, queue):
    jobs = Jobs(conn)
    job_id = BrandedId.generate()
    jobs.enqueue(queue, job_id, call("app.jobs.deliver", "chat-9"))
    for n, (cls, msg) in enumerate([("TimeoutError", "read timed out"),
                                    ("ConnectionError", "reset by peer")], start=1):
        claim = jobs.claim(queue, f"host-{n}:10{n}", 60_000)
        jobs.finish_many(queue, [Finish("retry", claim.job_id, claim.token, delay_ms=0,
                                        error=TB.format(cls=cls, msg=msg),
                                        error_class=f"builtins.{cls}")])
        jobs.promote(queue)
    claim = jobs.claim(queue, "host-3:103", 60_000)
    jobs.dead(queue, claim.job_id, claim.token, "failed", TB.format(cls="KeyError", msg="chat-9"))
    row = jobs.get(queue, job_id)
    assert [(a.number, a.worker, a.outcome, a.error_class, a.message) for a in attempts(row)] == [
        (1, "host-1:101", "failed", "builtins.TimeoutError", "TimeoutError: read timed out"),
        (2, "host-2:102", "failed", "builtins.ConnectionError", "ConnectionError: reset by peer"),
        (3, "host-3:103", "failed", "", "KeyError: chat-9")]
    text = viewer.get(job_url(queue, job_id)).content.decode()
    table = re.search(r'<table class="emq-table emq-attempts" id="emq-attempts">(.*?)</table>',
                      text, re.S).group(1)
    rows = re.findall(r'<tr data-attempt="(\d)" data-outcome="(\w+)">(.*?)</tr>', table, re.S)
    assert [(n, outcome) for n, outcome, _ in rows] == [("1", "failed"), ("2", "failed"),
                                                         ("3", "failed")]
    assert "host-2:102" in rows[1][2] and "<code>builtins.ConnectionError</code>" in rows[1][2]
    assert "ConnectionError: reset by peer" in rows[1][2]
    assert "not recorded" in rows[2][2]          # the single dead script names no class
    # Each traceback folds, under an id the live refresh keeps open.
    assert 'id="emq-attempt-1-traceback"' in rows[0][2]
    assert "raise TimeoutError(&#x27;read timed out&#x27;)" in rows[0][2]
    assert "<h2>Last error</h2>" not in text


def test_an_attempt_without_an_error_says_how_it_ended(conn, queue):
    jobs = Jobs(conn)
    job_id = BrandedId.generate()
    jobs.enqueue(queue, job_id, call("app.jobs.export"))
    claim = jobs.claim(queue, "host-1:1", 60_000)
    jobs.retry(queue, claim.job_id, claim.token, 0, "boom")
    jobs.promote(queue)
    claim = jobs.claim(queue, "host-2:2", 60_000)
    assert [(a.number, a.worker, a.outcome) for a in attempts(jobs.get(queue, job_id))] == [
        (1, "host-1:1", "failed"), (2, "host-2:2", "running")]
    jobs.ack(queue, claim.job_id, claim.token)
    assert attempts(jobs.get(queue, job_id))[-1].outcome == "done"


def _schedule(jobs, queue, n, path="app.jobs.send", group=None, arg="user"):
    ids = []
    for i in range(n):
        job_id = BrandedId.generate()
        jobs.enqueue_in(queue, job_id, call(path, f"{arg}-{i}"), 60_000 + i, group=group)
        ids.append(job_id)
    return ids


def test_a_search_reads_a_window_of_the_set_and_says_which(viewer, conn, queue):
    jobs = Jobs(conn)
    plain = _schedule(jobs, queue, 30)
    wanted = _schedule(jobs, queue, 3, path="app.notify.deliver", group="chat-9", arg="chat")
    _schedule(jobs, queue, 2, path="app.notify.deliver", group="chat-1")
    response = viewer.get(set_url(queue, "schedule") + "?function=notify.deliver&lane=chat-9")
    text = response.content.decode()
    found = re.findall(r'<tr data-job="(JOB\w+)">', text)
    assert found == wanted
    searched = re.search(r'<p class="emq-searched" id="emq-searched">(.*?)</p>', text, re.S)
    assert searched, text
    said = " ".join(searched.group(1).split())
    assert said.startswith("Searched the first 35 of 35 jobs in schedule (soonest run-at first): "
                           "<strong>3 matches</strong> function contains &quot;notify.deliver&quot;, "
                           "lane chat-9."), said
    assert "search on from" not in said     # the set's end was reached
    assert 'class="emq-pager"' not in text
    # The filter bar keeps the values; the arguments' text filters too.
    assert 'value="notify.deliver"' in text and 'value="chat-9"' in text
    text = viewer.get(set_url(queue, "schedule") + "?text=%22user-7%22").content.decode()
    assert re.findall(r'<tr data-job="(JOB\w+)">', text) == [plain[7]]
    # Nothing matches: said so.
    text = viewer.get(set_url(queue, "schedule") + "?function=nope").content.decode()
    assert "No job matches function contains &quot;nope&quot; in the jobs searched" in text


def test_a_search_stops_at_a_page_of_matches_and_goes_on_from_there(viewer, conn, queue):
    jobs = Jobs(conn)
    ids = _schedule(jobs, queue, 8)
    text = viewer.get(set_url(queue, "schedule") + "?function=send&per_page=3").content.decode()
    assert re.findall(r'<tr data-job="(JOB\w+)">', text) == ids[:3]
    nxt = re.search(r'<a href="([^"]+)" id="emq-search-next">search on from job 4 ›</a>', text)
    assert nxt and "a page of matches: the search stopped there" in text
    query = parse_qs(urlsplit(nxt.group(1).replace("&amp;", "&")).query)
    assert query["from"] == ["4"] and query["function"] == ["send"]
    text = viewer.get(nxt.group(1).replace("&amp;", "&")).content.decode()
    assert re.findall(r'<tr data-job="(JOB\w+)">', text) == ids[3:6]
    assert "Searched jobs 4–6 of 8 in schedule" in " ".join(text.split())


def test_the_state_filter_opens_the_same_search_on_another_set(viewer, conn, queue):
    response = viewer.get(set_url(queue, "schedule") + "?function=send&state=dead&from=3")
    assert response.status_code == 302
    assert response["Location"] == set_url(queue, "dead") + "?function=send"


def test_the_archive_link_carries_the_filters(make_staff, conn, queue):
    from django.test import Client

    client = Client()
    client.force_login(make_staff("view_queue", "view_jobrecord", username="archivist"))
    text = client.get(set_url(queue, "dead") + "?function=deliver&lane=chat-9&text=42").content.decode()
    link = re.search(r'<a href="([^"]+)" id="emq-archive-search">', text).group(1)
    query = parse_qs(urlsplit(link.replace("&amp;", "&")).query)
    assert urlsplit(link).path == "/admin/echomq_django/jobrecord/"
    assert query == {"queue__exact": [queue], "lane__exact": ["chat-9"],
                     "state__exact": ["dead"], "q": ["deliver 42"]}
    assert client.get(link.replace("&amp;", "&")).status_code == 200


def test_a_search_costs_the_same_commands_whatever_the_set_holds(conn, queue, redis_client):
    """A window of SEARCH_WINDOW members at most: one ZRANGE, one script with
    one HMGET per member looked at, then the matches' rows."""
    jobs = Jobs(conn)
    ks = Keyspace(queue)
    now = int(redis_client.time()[0]) * 1000
    pipe = redis_client.pipeline(transaction=False)
    for i in range(SEARCH_WINDOW + 500):
        job_id = f"JOB{i:020d}"
        pipe.hset(ks.job(job_id), mapping={"state": "scheduled",
                                           "payload": call("app.jobs.send", i)})
        pipe.zadd(ks.schedule, {job_id: now + 60_000 + i})
    pipe.execute()

    def spent(filters):
        before = nodes.command_stats(redis_client)
        page = search_page(conn, queue, "schedule", filters)
        after = nodes.command_stats(redis_client)
        delta = {k: after[k] - before.get(k, 0) for k in after}
        delta["info"] -= len(nodes.primaries(redis_client))   # the INFO that read each one
        return page, {k: v for k, v in delta.items() if v}

    page, delta = spent(Filters(function="nothing.matches"))
    assert (page.examined, page.next_start, page.rows) == (SEARCH_WINDOW, SEARCH_WINDOW, [])
    # The head's limits are one HMGET; the search one per member.
    assert delta["hmget"] == 1 + SEARCH_WINDOW and delta["zrange"] == 1, delta
    page, delta = spent(Filters(text="[7]"))
    assert [r.job_id for r in page.rows] == ["JOB00000000000000000007"]
    # ... and the match's row one more.
    assert page.examined == SEARCH_WINDOW and delta["hmget"] == 1 + SEARCH_WINDOW + 1, delta
    assert jobs  # the queue's rows were written by hand: no admission needed


def test_the_search_script_refuses_a_window_too_big(conn, queue):
    ks = Keyspace(queue)
    with pytest.raises(ValueError, match="at most 1000 ids"):
        scripts.run(conn, "admin/search", [ks.pending],
                    [ks.base, json.dumps(["JOB1"] * 1001), "", "", "", 10])
    with pytest.raises(ValueError, match="base root"):
        scripts.run(conn, "admin/search", [ks.pending], ["emq:", "[]", "", "", "", 10])
