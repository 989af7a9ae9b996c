"""conf: defaults, validation ids, caching across override_settings, queue names."""

import os

import pytest
from django.test import override_settings

from echomq_django.conf import Config, clear_config_cache, get_config, validate
from echomq_django.rules import check_queue_name as validate_queue_name
from echomq_django.exceptions import ConfigurationError


def test_absent_setting_gives_all_defaults(settings):
    del settings.ECHOMQ
    # pytest-django sends no setting_changed for a deleted setting (Django's
    # override_settings does); an earlier `check` may have cached the config.
    clear_config_cache()
    config = get_config()
    assert config == Config(
        url="embedded",
        cache=None,
        connection_kwargs={},
        queues=("default",),
        lease_ms=30000,
        max_attempts=3,
        backoff=("jitter", ("exponential", 1000, 300000)),
        max_payload_bytes=524288,
        result_ttl_ms=86400000,
        dead_ttl_ms=604800000,
        dead_max=10000,
        promote_batch=1000,
        shutdown_grace_ms=30000,
        embedded_dir=os.path.join(os.fspath(settings.BASE_DIR), ".echomq"),
        schedules={},
        prune_schedules=False,
    )


def test_embedded_dir_falls_back_to_cwd_without_base_dir(settings, tmp_path, monkeypatch):
    del settings.BASE_DIR
    monkeypatch.chdir(tmp_path)
    with override_settings(ECHOMQ={}):
        assert get_config().embedded_dir == os.path.join(str(tmp_path), ".echomq")


def test_every_key_is_read():
    raw = {
        "URL": "redis://h:1/2",
        "CONNECTION_KWARGS": {"socket_timeout": 5},
        "QUEUES": ["a", "b.c_d-e"],
        "LEASE_MS": 1,
        "MAX_ATTEMPTS": 1,
        "BACKOFF": ["jitter", ["fixed", 5]],
        "MAX_PAYLOAD_BYTES": 2,
        "RESULT_TTL_MS": 3,
        "DEAD_TTL_MS": 4,
        "DEAD_MAX": 5,
        "PROMOTE_BATCH": 100000,
        "SHUTDOWN_GRACE_MS": 0,
        "EMBEDDED_DIR": "/tmp/x",
        "SCHEDULES": {"nightly": {"job": "a.b"}},
        "PRUNE_SCHEDULES": True,
    }
    with override_settings(ECHOMQ=raw):
        c = get_config()
    assert (c.url, c.cache, c.connection_kwargs) == ("redis://h:1/2", None, {"socket_timeout": 5})
    assert c.queues == ("a", "b.c_d-e")
    assert c.backoff == ("jitter", ("fixed", 5))
    assert (c.lease_ms, c.max_attempts, c.max_payload_bytes) == (1, 1, 2)
    assert (c.result_ttl_ms, c.dead_ttl_ms, c.dead_max) == (3, 4, 5)
    assert (c.promote_batch, c.shutdown_grace_ms) == (100000, 0)
    assert c.embedded_dir == "/tmp/x"
    assert c.schedules == {"nightly": {"job": "a.b"}}
    assert c.prune_schedules is True


def test_config_is_frozen():
    with pytest.raises(AttributeError):
        get_config().lease_ms = 1


def test_override_settings_changes_and_restores_get_config(valkey_url):
    before = get_config()
    assert before.url == valkey_url
    assert get_config() is before  # cached
    with override_settings(ECHOMQ={"URL": "redis://other:6379/3", "LEASE_MS": 5}):
        inside = get_config()
        assert (inside.url, inside.lease_ms) == ("redis://other:6379/3", 5)
    after = get_config()
    assert (after.url, after.lease_ms) == (valkey_url, 30000)


def test_cache_only_config_has_no_url():
    caches = {"q": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": "redis://127.0.0.1:1/0"}}
    with override_settings(CACHES=caches, ECHOMQ={"CACHE": "q"}):
        assert (get_config().url, get_config().cache) == (None, "q")


@pytest.mark.parametrize(
    "url",
    ["embedded", "redis://localhost:6379/0", "rediss://user:pw@host:6380/1", "unix:///tmp/v.sock?db=2",
     "redis+sentinel://127.0.0.1:26379/mymaster", "redis+sentinel://h/mymaster",
     "redis+sentinel://u:pw@h1:26379,h2:26380/mymaster/2?socket_timeout=1&sentinel_password=x",
     "rediss+sentinel://h:26379/svc/0", "redis+cluster://h1:7000,h2:7001",
     "redis+cluster://h:7000/0?socket_timeout=2", "rediss+cluster://u:p@h:7000"],
)
def test_accepted_urls(url):
    assert validate({"URL": url}) == []


BAD = [
    ({"URL": "x", "CACHE": "y"}, "echomq.E003", "URL", "CACHE"),
    ({"URL": "http://localhost/"}, "echomq.E004", "URL", "redis"),
    ({"URL": "redis://h:notaport/0"}, "echomq.E004", "URL", "URL"),
    ({"URL": 6379}, "echomq.E004", "URL", "URL"),
    ({"URL": "redis+sentinel://h:26379"}, "echomq.E004", "URL", "wants the service name"),
    ({"URL": "redis+sentinel://h:26379/"}, "echomq.E004", "URL", "wants the service name"),
    ({"URL": "redis+sentinel://h:26379/svc/x"}, "echomq.E004", "URL", "the database number"),
    ({"URL": "redis+sentinel://h:26379/svc/0/1"}, "echomq.E004", "URL", "at most one path segment"),
    ({"URL": "redis+sentinel://h:notaport/svc"}, "echomq.E004", "URL", "got 'h:notaport'"),
    ({"URL": "redis+sentinel://"}, "echomq.E004", "URL", "wants host:port"),
    ({"URL": "redis+sentinel://h:26379/svc?socket_timeout=abc"}, "echomq.E004", "URL",
     "socket_timeout"),
    ({"URL": "redis+cluster://h:7000/2"}, "echomq.E004", "URL", "database 0 only"),
    ({"URL": "redis+cluster://h:70000"}, "echomq.E004", "URL", "got 'h:70000'"),
    ({"URL": "redis+cluster://h:7000,,h2:7001"}, "echomq.E004", "URL", "wants host:port"),
    ({"URL": "redis+valkey://h:7000"}, "echomq.E004", "URL", "redis+sentinel://"),
    ({"CACHE": "missing"}, "echomq.E005", "CACHE", "not in settings.CACHES"),
    ({"CACHE": "default"}, "echomq.E005", "CACHE", "django_redis"),
    ({"LEASE_MS": 0}, "echomq.E006", "LEASE_MS", "LEASE_MS must be in 1..9007199254740992"),
    ({"LEASE_MS": 2**53 + 1}, "echomq.E006", "LEASE_MS", "LEASE_MS must be in 1..9007199254740992"),
    ({"LEASE_MS": 1.5}, "echomq.E006", "LEASE_MS", "LEASE_MS must be an int"),
    ({"LEASE_MS": True}, "echomq.E006", "LEASE_MS", "LEASE_MS must be an int"),
    ({"MAX_ATTEMPTS": 0}, "echomq.E006", "MAX_ATTEMPTS", "MAX_ATTEMPTS must be in 1.."),
    ({"MAX_PAYLOAD_BYTES": -1}, "echomq.E006", "MAX_PAYLOAD_BYTES", "MAX_PAYLOAD_BYTES must be"),
    ({"RESULT_TTL_MS": "1"}, "echomq.E006", "RESULT_TTL_MS", "RESULT_TTL_MS must be"),
    ({"DEAD_TTL_MS": 0}, "echomq.E006", "DEAD_TTL_MS", "DEAD_TTL_MS must be"),
    ({"DEAD_MAX": 0}, "echomq.E006", "DEAD_MAX", "DEAD_MAX must be"),
    ({"PROMOTE_BATCH": 0}, "echomq.E006", "PROMOTE_BATCH", "PROMOTE_BATCH must be in 1..100000"),
    ({"PROMOTE_BATCH": 100001}, "echomq.E006", "PROMOTE_BATCH", "PROMOTE_BATCH must be in 1..100000"),
    ({"SHUTDOWN_GRACE_MS": -1}, "echomq.E006", "SHUTDOWN_GRACE_MS", "SHUTDOWN_GRACE_MS must be in 0.."),
    ({"SHUTDOWN_GRACE_MS": False}, "echomq.E006", "SHUTDOWN_GRACE_MS", "must be an int"),
    ({"QUEUES": ["ok", "bad name"]}, "echomq.E007", "QUEUES", "'bad name'"),
    ({"QUEUES": ["{tag}"]}, "echomq.E007", "QUEUES", "[A-Za-z0-9._-]"),
    ({"QUEUES": []}, "echomq.E007", "QUEUES", "non-empty"),
    ({"QUEUES": "default"}, "echomq.E007", "QUEUES", "QUEUES"),
    ({"QUEUES": ["a", "a"]}, "echomq.E007", "QUEUES", "more than once"),
    ({"QUEUES": ["a", 5]}, "echomq.E007", "QUEUES", "must be a str"),
    ({"BACKOFF": ("fixed", 2**53 + 1)}, "echomq.E012", "BACKOFF", "0..2**53"),
    ({"BACKOFF": ["exponential", 1000, 2**60]}, "echomq.E012", "BACKOFF", "1..2**53"),
    ({"CONNECTION_KWARGS": [("a", 1)]}, "echomq.E008", "CONNECTION_KWARGS", "CONNECTION_KWARGS must be a dict"),
    ({"SCHEDULES": ["x"]}, "echomq.E009", "SCHEDULES", "SCHEDULES must be a dict"),
    ({"EMBEDDED_DIR": 3}, "echomq.E010", "EMBEDDED_DIR", "EMBEDDED_DIR must be a path"),
    ({"PRUNE_SCHEDULES": 1}, "echomq.E010", "PRUNE_SCHEDULES", "PRUNE_SCHEDULES must be a bool"),
    ({"QUEUE_LIMITS": [("q", {})]}, "echomq.E015", "QUEUE_LIMITS", "must be a dict of queue"),
    ({"QUEUE_LIMITS": {"bad name": {}}}, "echomq.E015", "QUEUE_LIMITS", "'bad name'"),
    ({"QUEUE_LIMITS": {"q": {"speed": 3}}}, "echomq.E015", "QUEUE_LIMITS", "unknown keys ['speed']"),
    ({"QUEUE_LIMITS": {"q": {"rate": 30}}}, "echomq.E015", "QUEUE_LIMITS",
     "QUEUE_LIMITS['q']['rate'] must be (count, per_ms)"),
    ({"QUEUE_LIMITS": {"q": {"lane_rate": (1, 0)}}}, "echomq.E015", "QUEUE_LIMITS",
     "QUEUE_LIMITS['q']['lane_rate'] per_ms"),
    ({"QUEUE_LIMITS": {"q": {"concurrency": 0}}}, "echomq.E015", "QUEUE_LIMITS",
     "QUEUE_LIMITS['q']['concurrency'] must be in 1..9007199254740992, got 0"),
    ({"QUEUE_LIMITS": {"q": {"concurrency": 2**60}}}, "echomq.E015", "QUEUE_LIMITS",
     "QUEUE_LIMITS['q']['concurrency'] must be in 1..9007199254740992"),
    ({"QUEUE_LIMITS": {"q": {"lane_concurrency": True}}}, "echomq.E015", "QUEUE_LIMITS",
     "QUEUE_LIMITS['q']['lane_concurrency'] must be an int"),
]


@pytest.mark.parametrize("raw, check_id, key, text", BAD, ids=[f"{b[1]}-{b[2]}-{i}" for i, b in enumerate(BAD)])
def test_each_problem_has_its_id_and_names_the_key(raw, check_id, key, text):
    problems = validate(raw)
    assert (check_id, key) in [(cid, k) for cid, k, _ in problems], problems
    message = next(m for cid, k, m in problems if (cid, k) == (check_id, key))
    assert key in message and text in message
    with override_settings(ECHOMQ=raw):
        with pytest.raises(ConfigurationError) as info:
            get_config()
    assert check_id in str(info.value) and key in str(info.value)


def test_a_refused_url_never_shows_its_password():
    for url in ("redis+sentinel://u:s3cret@h:26379", "redis+foo://:s3cret@h",
                "redis://u:s3cret@h:notaport/0", "redis+cluster://u:s3cret@h:7000/3"):
        [(check_id, _key, message)] = validate({"URL": url})
        assert check_id == "echomq.E004" and "s3cret" not in message, message


def test_not_a_dict_is_e001():
    assert validate(["URL"]) == [("echomq.E001", "", "ECHOMQ must be a dict, got list")]
    with override_settings(ECHOMQ=None):
        with pytest.raises(ConfigurationError, match="E001"):
            get_config()


def test_unknown_key_is_e002_and_lists_the_known_keys():
    [(check_id, key, message)] = validate({"LEASE": 5})
    assert (check_id, key) == ("echomq.E002", "LEASE")
    assert "'LEASE'" in message and "LEASE_MS" in message and "PRUNE_SCHEDULES" in message


def test_all_problems_are_reported_at_once():
    ids = {cid for cid, _, _ in validate({"URL": "ftp://x", "LEASE_MS": 0, "SCHEDULES": 1})}
    assert ids == {"echomq.E004", "echomq.E006", "echomq.E009"}


def test_fixing_the_setting_clears_the_error():
    with override_settings(ECHOMQ={"LEASE_MS": 0}):
        with pytest.raises(ConfigurationError):
            get_config()
    assert get_config().lease_ms == 30000


@pytest.mark.parametrize("name", ["a", "default", "A.b_c-9", "x" * 100])
def test_valid_queue_names(name):
    assert validate_queue_name(name) == name


@pytest.mark.parametrize("name", ["", "x" * 101, "a b", "a:b", "{a}", "é"])
def test_invalid_queue_names(name):
    with pytest.raises(ValueError, match=r"queue name must be 1-100 characters of \[A-Za-z0-9._-\], got"):
        validate_queue_name(name)


@pytest.mark.parametrize("name", [None, 5, b"bytes", ["a"]])
def test_a_queue_name_that_is_not_a_str_is_a_type_error(name):
    with pytest.raises(TypeError, match=r"queue name must be a str of 1-100 characters of "
                                        rf"\[A-Za-z0-9._-\], got {type(name).__name__}"):
        validate_queue_name(name)
