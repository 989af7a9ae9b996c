"""checks: each bad ECHOMQ value surfaces from `manage.py check` with its stable id."""

import pytest
from django.core.checks import Error, run_checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings


def _echomq_ids():
    return sorted(e.id for e in run_checks(tags=["echomq"]))


def test_valid_settings_pass():
    assert _echomq_ids() == []
    call_command("check", tags=["echomq"])


@pytest.mark.parametrize("raw", [
    {"URL": "redis+sentinel://127.0.0.1:26379/mymaster/0?socket_timeout=2",
     "REPLICAS": {"min": 1, "timeout_ms": 200}},
    {"URL": "rediss+sentinel://app:pw@s1:26379,s2:26379/mymaster?sentinel_password=x"},
    {"URL": "redis+cluster://127.0.0.1:7000,127.0.0.1:7001"},
])
def test_sentinel_and_cluster_urls_pass(raw):
    with override_settings(ECHOMQ=raw):
        assert _echomq_ids() == []


def test_absent_setting_passes(settings):
    del settings.ECHOMQ
    assert _echomq_ids() == []


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("redis://localhost", ["echomq.E001"]),
        ({"LEASE": 1}, ["echomq.E002"]),
        ({"URL": "redis://h:1/0", "CACHE": "x"}, ["echomq.E003", "echomq.E005"]),
        ({"URL": "memcache://h"}, ["echomq.E004"]),
        ({"URL": "redis+sentinel://h:26379"}, ["echomq.E004"]),
        ({"URL": "redis+cluster://h:7000/2"}, ["echomq.E004"]),
        ({"URL": "redis+sentinel://h:26379/svc/0", "REPLICAS": {"min": 0, "timeout_ms": 1}},
         ["echomq.E018"]),
        ({"CACHE": "default"}, ["echomq.E005"]),
        ({"LEASE_MS": -5, "PROMOTE_BATCH": 0}, ["echomq.E006", "echomq.E006"]),
        ({"QUEUES": ["a:b"]}, ["echomq.E007"]),
        ({"CONNECTION_KWARGS": "socket_timeout=1"}, ["echomq.E008"]),
        ({"SCHEDULES": None}, ["echomq.E009"]),
        ({"PRUNE_SCHEDULES": "yes"}, ["echomq.E010"]),
    ],
)
def test_bad_settings_give_stable_ids(raw, expected):
    with override_settings(ECHOMQ=raw):
        errors = run_checks(tags=["echomq"])
    assert sorted(e.id for e in errors) == expected
    assert all(isinstance(e, Error) for e in errors)


@pytest.mark.django_db  # the model checks ask the database (JSONField support)
def test_check_command_fails_naming_id_and_key():
    with override_settings(ECHOMQ={"LEASE_MS": 0}):
        with pytest.raises(SystemCheckError) as info:
            call_command("check")
    text = str(info.value)
    assert "echomq.E006" in text and "LEASE_MS must be in 1..9007199254740992" in text
    assert "settings.ECHOMQ['LEASE_MS']" in text


def test_checks_are_registered_under_the_echomq_tag():
    from django.core.checks import registry

    assert "echomq" in registry.registry.tags_available()


def _jitter_nested(depth):
    policy = ["fixed", 10]
    for _ in range(depth):
        policy = ["jitter", policy]
    return policy


@pytest.mark.parametrize("backoff", [("linear", 1), "exponential", ("exponential", -1, 0),
                                     ["jitter", ["fixed", -5]], ("fixed", 2**53 + 1),
                                     ["exponential", 1000, 2**60], _jitter_nested(5000)])
def test_a_bad_backoff_policy_fails_the_check(backoff):
    from django.core.checks import run_checks
    from django.test import override_settings

    with override_settings(ECHOMQ={"URL": "redis://127.0.0.1:6379/0", "BACKOFF": backoff}):
        errors = [e for e in run_checks(tags=["echomq"]) if e.id == "echomq.E012"]
    assert len(errors) == 1 and "BACKOFF" in errors[0].msg


def test_a_good_backoff_list_passes_the_check():
    from django.core.checks import run_checks
    from django.test import override_settings

    with override_settings(ECHOMQ={"URL": "redis://127.0.0.1:6379/0",
                                   "BACKOFF": ["jitter", ["exponential", 100, 1000]]}):
        assert [e for e in run_checks(tags=["echomq"]) if e.id == "echomq.E012"] == []


@pytest.mark.django_db  # the model checks ask the database (JSONField support)
def test_manage_py_check_names_a_backoff_out_of_range():
    with override_settings(ECHOMQ={"BACKOFF": ("jitter", ("exponential", 1000, 2**53 + 1))}):
        with pytest.raises(SystemCheckError) as info:
            call_command("check")
    text = str(info.value)
    assert "echomq.E012" in text and "BACKOFF" in text and "1..2**53" in text
