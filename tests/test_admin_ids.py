"""The admin checks job ids before sending anything (issue 9, item 5): an id
that breaks the job-id rule (rules.check_job_id) is a clear error from
Actions, 400 from an action view, 404 from the job page; nothing is written.

Each test plants a row and a set member under such an id by hand, so a call
that reached the server would find something to move or delete."""

from __future__ import annotations

import pytest

from echomq_django.admin.actions import Actions
from echomq_django.protocol.keyspace import Keyspace
from tests.state import queue_pattern, snapshot
from tests.test_admin import action_url, changer, job_url, make_staff, viewer  # noqa: F401

pytestmark = pytest.mark.django_db

#: Ids no job can have: a blank, a ':' (it would read as another key's
#: shape), braces (a hash tag), 201 characters.
BAD_IDS = ["bad id", "a:b", "{x}", "J" * 201]


def _plant(redis_client, queue, job_id):
    """A scheduled row, a dead row and set members under ``job_id``."""
    ks = Keyspace(queue)
    redis_client.hset(ks.job(job_id), mapping={"state": "scheduled", "payload": "{}"})
    redis_client.zadd(ks.schedule, {job_id: 1})
    redis_client.zadd(ks.dead, {job_id: 1})


@pytest.mark.parametrize("job_id", BAD_IDS)
@pytest.mark.parametrize("method", ["run_now", "retry_dead", "delete", "cancel"])
def test_actions_refuse_a_bad_job_id_before_sending(redis_client, queue, job_id, method):
    _plant(redis_client, queue, job_id)
    before = snapshot(redis_client, queue_pattern(queue))
    with pytest.raises(ValueError, match=r"^job_id must be 1-200 characters of"):
        getattr(Actions(redis_client), method)(queue, job_id)
    assert snapshot(redis_client, queue_pattern(queue)) == before


@pytest.mark.parametrize("method", ["run_now", "retry_dead", "delete", "cancel"])
def test_actions_refuse_a_job_id_that_is_not_a_str(redis_client, queue, method):
    with pytest.raises(TypeError, match="job_id must be a str"):
        getattr(Actions(redis_client), method)(queue, 5)


@pytest.mark.parametrize("name", ["run_now", "retry", "cancel", "delete"])
def test_an_action_view_answers_400_for_a_bad_job_id(changer, redis_client, queue, name):
    _plant(redis_client, queue, "bad id")
    before = snapshot(redis_client, queue_pattern(queue))
    for data in ({"job": "bad id"}, {"job": "bad id", "confirm": "yes"}):
        response = changer.post(action_url(queue, name), data)
        assert response.status_code == 400, (name, data)
        assert snapshot(redis_client, queue_pattern(queue)) == before


def test_an_action_view_answers_400_for_a_bad_schedule_name(changer, redis_client, queue):
    ks = Keyspace(queue)
    redis_client.zadd(ks.repeat, {"a b": 1})
    before = snapshot(redis_client, queue_pattern(queue))
    for name in ("repeat_run_now", "repeat_remove"):
        response = changer.post(action_url(queue, name), {"name": "a b", "confirm": "yes"})
        assert response.status_code == 400, name
    assert snapshot(redis_client, queue_pattern(queue)) == before


def test_the_job_page_answers_404_for_a_bad_job_id(viewer, redis_client, queue):
    _plant(redis_client, queue, "bad id")
    assert viewer.get(job_url(queue, "bad%20id")).status_code == 404
