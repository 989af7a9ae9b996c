"""Recurring schedules declared in code and settings reach the registry at
runechomq's boot; bad declarations fail the system check; the example works."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.checks import run_checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from echomq_django import job
from echomq_django.api import registry
from echomq_django.repeat import Repeat, declared_schedules, plan
from tests.testapp import jobs as testjobs

ROOT = Path(__file__).resolve().parent.parent


def test_job_every_declares_a_schedule():
    assert testjobs.hourly_report.schedule == {
        "queue": "default", "name": "tests.testapp.jobs.hourly_report", "every_ms": 3_600_000,
        "cron": None, "tz": None, "missed": "coalesce",
        "template": {"job": "tests.testapp.jobs.hourly_report", "args": [], "kwargs": {}}}
    names = [d["name"] for d in declared_schedules(registry.schedules(), {})]
    assert "tests.testapp.jobs.hourly_report" in names


@pytest.mark.parametrize("options, words", [
    ({"cron": "61 * * * *"}, "cron"),
    ({"cron": "0 3 * * *", "tz": "Mars/Olympus"}, "tz"),
    ({"every": 0}, "every"),
    ({"cron": "0 3 * * *", "missed": "sometimes"}, "missed"),
])
def test_bad_job_schedules_raise_at_decoration(options, words):
    with pytest.raises(ValueError, match=words):
        job(**options)(testjobs.add.fn)


def test_settings_schedules_become_declarations():
    declared = declared_schedules(registry.schedules(), {
        "nightly": {"job": "tests.testapp.jobs.add", "args": [1, 2], "cron": "0 3 * * *",
                    "tz": "Europe/Berlin", "queue": "reports"}})
    entry = [d for d in declared if d["name"] == "nightly"][0]
    assert entry == {"queue": "reports", "name": "nightly", "cron": "0 3 * * *",
                     "tz": "Europe/Berlin",
                     "template": {"job": "tests.testapp.jobs.add", "args": [1, 2], "kwargs": {}}}
    assert plan([entry])


@pytest.mark.parametrize("spec, words", [
    ({"job": "x.y", "cron": "bad cron"}, "cron"),
    ({"job": "x.y", "every_ms": 1000, "color": "red"}, "unknown keys"),
    ({"every_ms": 1000}, "exactly one of 'job'"),
])
def test_bad_settings_schedules_fail_the_check(valkey_url, spec, words):
    with override_settings(ECHOMQ={"URL": valkey_url, "SCHEDULES": {"broken": spec}}):
        errors = [e for e in run_checks(tags=["echomq"]) if e.id == "echomq.E011"]
    assert len(errors) == 1 and words in errors[0].msg, errors


def test_settings_schedule_kwargs_nested_too_deep_fail_the_check(valkey_url):
    deep = []
    for _ in range(100_000):
        deep = [deep]
    loop = []
    loop.append(loop)
    with override_settings(ECHOMQ={"URL": valkey_url, "SCHEDULES": {
            "deep": {"job": "tests.testapp.jobs.add", "args": [1], "kwargs": {"b": deep},
                     "every_ms": 1000}}}):
        errors = [e for e in run_checks(tags=["echomq"]) if e.id == "echomq.E011"]
    assert len(errors) == 1 and "template is nested deeper than 100 levels" in errors[0].msg
    with override_settings(ECHOMQ={"URL": valkey_url, "SCHEDULES": {
            "loop": {"job": "tests.testapp.jobs.add", "args": [1, loop], "every_ms": 1000}}}):
        errors = [e for e in run_checks(tags=["echomq"]) if e.id == "echomq.E011"]
    assert len(errors) == 1 and "template['args'][1] contains itself" in errors[0].msg


def test_valid_settings_pass_the_check(valkey_url):
    with override_settings(ECHOMQ={"URL": valkey_url, "SCHEDULES": {
            "ok": {"job": "tests.testapp.jobs.add", "args": [1], "kwargs": {"b": 2},
                   "every_ms": 60_000},
            "ctx": {"job": "tests.testapp.jobs.whoami", "every_ms": 60_000}}}):
        assert [e for e in run_checks(tags=["echomq"]) if e.id.startswith("echomq.")] == []


def test_runechomq_boot_syncs_declared_schedules(conn, queue):
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="tests.settings", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "django", "runechomq", "default", "--burst"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    entry = Repeat(conn).get("default", "tests.testapp.jobs.hourly_report")
    assert entry is not None and entry.every_ms == 3_600_000
    assert entry.next_run_ms % 3_600_000 == 0  # on the hour grid
    # A second boot leaves it untouched (same next run).
    again = subprocess.run([sys.executable, "-m", "django", "runechomq", "default", "--burst"],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0
    assert Repeat(conn).get("default", "tests.testapp.jobs.hourly_report").next_run_ms == entry.next_run_ms
    assert "recurring schedules synced: unchanged" in again.stderr


@pytest.mark.slow
def test_the_example_project_runs_end_to_end(valkey_url):
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="example_project.settings",
               ECHOMQ_URL=valkey_url)
    out = subprocess.run([sys.executable, "manage.py", "workshop"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert ("all 53 jobs reached their expected final state, every figure within its limit"
            in out.stdout)
    # The figures the issue names, read back from the table and held to the
    # example's limits (settings.py: 1 per 34 ms, 1 per 1,000 ms per chat, 1 at once).
    figures = dict(re.findall(r"^  (sends .+?)\s{2,}(\d+)\s+\d+  \(", out.stdout, re.M))
    assert 0 < int(figures["sends started in any 1 s, all chats"]) <= 30, out.stdout
    assert int(figures["sends started in any 1 s, one chat"]) == 1, out.stdout
    assert int(figures["sends of one chat running at once"]) == 1, out.stdout
    assert re.search(r"^  longest a chat waited behind the room burst \(ms\)\s+\d+", out.stdout,
                     re.M), out.stdout
    assert re.search(r"burst: 6 notices to room RMM-\w+ at once: 6 delivered; [1-9]\d* "
                     r"deferral", out.stdout), out.stdout
    # The one task defined the Django way, read back by its TaskResult id.
    assert re.search(r"^django.tasks: round_recap cm\.notify:JOB\w+ SUCCESSFUL, return value "
                     r"\{'room': 'RMM-\w+', 'round': 'RND-\w+', 'attempt': 1\}$", out.stdout,
                     re.M), out.stdout
    assert "broadcast: 'Round over' to 40 players' chats, queued behind the burst: 40 delivered" \
        in out.stdout
    assert "standings_digest (daily cron, run now)" in out.stdout
    # The digest read the leaderboard: each player's best of two guesses.
    assert "out of 600): USR-ada 100%, USR-bo 77%, USR-cy 47%" in out.stdout
    assert "runechomq stopped on SIGTERM with exit code 0" in out.stdout
    # Every time column of the table says its zone.
    header = next(line for line in out.stdout.splitlines() if line.startswith("job id"))
    assert "due (UTC)" in header and "last claim (UTC)" in header


def test_a_schedule_naming_an_unregistered_job_fails_the_check(valkey_url):
    with override_settings(ECHOMQ={"URL": valkey_url, "SCHEDULES": {
            "typo": {"job": "nope.jobs.x", "every_ms": 1000}}}):
        errors = [e for e in run_checks(tags=["echomq"]) if e.id == "echomq.E013"]
    assert len(errors) == 1 and "'nope.jobs.x'" in errors[0].msg


@pytest.mark.parametrize("spec, problem", [
    ({"job": "tests.testapp.jobs.add", "every_ms": 60_000},
     "tests.testapp.jobs.add() cannot take these arguments: missing a required argument: 'a'"),
    ({"job": "tests.testapp.jobs.add", "args": [1, 2, 3], "cron": "0 3 * * *"},
     "tests.testapp.jobs.add() cannot take these arguments: too many positional arguments"),
    ({"job": "tests.testapp.jobs.whoami", "kwargs": {"context": 1}, "every_ms": 60_000},
     "tests.testapp.jobs.whoami() gets context= from the worker"),
    ({"template": {"job": "tests.testapp.jobs.add", "args": "12"}, "every_ms": 60_000},
     "args must be a list and kwargs a dict, got str and dict"),
])
@pytest.mark.django_db  # the model checks ask the database (JSONField support)
def test_a_schedule_whose_arguments_do_not_fit_its_job_fails_the_check(valkey_url, spec,
                                                                         problem):
    with override_settings(ECHOMQ={"URL": valkey_url, "SCHEDULES": {"nightly": spec}}):
        errors = [e for e in run_checks(tags=["echomq"]) if e.id.startswith("echomq.")]
        assert [e.id for e in errors] == ["echomq.E014"]
        assert errors[0].msg.startswith(f"recurring schedule 'nightly': {problem}")
        assert errors[0].obj == "settings.ECHOMQ['SCHEDULES']['nightly']"
        with pytest.raises(SystemCheckError, match="echomq.E014"):
            call_command("check")
