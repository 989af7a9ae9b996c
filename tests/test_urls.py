"""connection.urls: the URL forms, what each builds, and the options it passes."""

import pytest
import redis

from echomq_django.connection.urls import build_client, check_url, parse_target, redacted


def test_cluster_url_takes_seed_nodes_credentials_tls_and_query_options():
    target = parse_target("rediss+cluster://ops:s%40cret@10.0.0.1:7000,10.0.0.2:7001/0"
                          "?socket_timeout=2.5&client_name=w1")
    assert target.kind == "cluster"
    assert target.nodes == (("10.0.0.1", 7000), ("10.0.0.2", 7001))
    assert target.kwargs["username"] == "ops"
    assert target.kwargs["password"] == "s@cret"
    assert target.kwargs["socket_timeout"] == 2.5
    assert target.kwargs["client_name"] == "w1"
    assert "db" not in target.kwargs and "host" not in target.kwargs


def test_sentinel_url_takes_service_db_and_the_sentinels_own_password():
    target = parse_target("redis+sentinel://app:pw@s1:26379,s2/mymaster/3"
                          "?sentinel_password=sp&socket_timeout=1")
    assert target.kind == "sentinel"
    assert target.nodes == (("s1", 26379), ("s2", 26379))  # the sentinel port by default
    assert target.service == "mymaster"
    assert (target.kwargs["db"], target.kwargs["username"], target.kwargs["password"]) == \
        (3, "app", "pw")
    assert target.sentinel_kwargs == {"password": "sp"}
    assert "sentinel_password" not in target.kwargs


def test_tls_sentinel_url_asks_tls_of_the_sentinels_too():
    target = parse_target("rediss+sentinel://s1:26379/svc")
    assert target.sentinel_kwargs == {"ssl": True}
    assert target.kwargs["db"] == 0


@pytest.mark.parametrize("url, words", [
    ("redis+cluster://h:1/2", "database 2"),
    ("redis+cluster://h:notaport", "host:port"),
    ("redis+cluster://h:0", "host:port"),
    ("redis+cluster://:7000", "host:port"),
    ("redis+sentinel://h:26379", "service name"),
    ("redis+sentinel://h:26379/svc/x", "database number"),
    ("redis+sentinel://h:26379/svc/1/2", "at most one path segment"),
    ("redis+cluster+x://h:1", "must use scheme"),
    ("memcache://h:1", "must use scheme"),
    ("redis://h:x/0", "not a valid redis:// URL"),
])
def test_malformed_urls_are_refused_naming_the_rule(url, words):
    problem = check_url(url)
    assert problem is not None and words in problem, problem
    assert problem.startswith("URL")
    with pytest.raises(ValueError, match="URL"):
        build_client(url)


@pytest.mark.parametrize("url", ["embedded", "redis://h:1/0", "unix:///tmp/s.sock?db=1",
                                 "redis+cluster://h:1", "rediss+cluster://u:p@h:1,g:2/0",
                                 "redis+sentinel://h:1/svc", "rediss+sentinel://h:1,g:2/svc/4"])
def test_good_urls_pass(url):
    assert check_url(url) is None


def test_a_sentinel_client_is_a_plain_redis_client_on_the_service_and_never_connects():
    client = build_client("redis+sentinel://sentinel.example.invalid:26379/mymaster/2"
                          "?socket_timeout=1")
    assert type(client) is redis.Redis
    pool = client.connection_pool
    assert pool.service_name == "mymaster"
    assert pool.connection_kwargs["db"] == 2
    from echomq_django.connection import describe
    assert describe(client) == "redis+sentinel://sentinel.example.invalid:26379/mymaster/2"


def test_a_cache_alias_with_a_cluster_client_is_refused_for_the_cluster_url():
    from django.test import override_settings

    from echomq_django.connection.urls import check_cache

    caches = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
              "c": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": "redis://h:1/0",
                    "OPTIONS": {"REDIS_CLIENT_CLASS": "redis.cluster.RedisCluster"}},
              "ok": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": "redis://h:1/0"}}
    with override_settings(CACHES=caches):
        problem = check_cache("c")
        assert problem is not None and "redis+cluster://" in problem
        assert check_cache("ok") is None


@pytest.mark.parametrize("url, nodes", [
    ("redis+cluster://[::1]:7401,[fe80::2]", (("::1", 7401), ("fe80::2", 6379))),
    ("redis+sentinel://[::1]:7510/svc/0", (("::1", 7510),)),
    ("redis+cluster://h1", (("h1", 6379),)),
])
def test_ipv6_addresses_and_default_ports(url, nodes):
    assert parse_target(url).nodes == nodes


@pytest.mark.parametrize("url, words", [
    ("redis+cluster://h:1?db=3", "database 3"),
    ("redis+cluster://h:\uff17\uff14", "host:port"),     # fullwidth digits
    ("redis+cluster://h:1, g:2", "host:port"),           # a space before a host
])
def test_more_malformed_cluster_urls(url, words):
    problem = check_url(url)
    assert problem is not None and words in problem, problem


def test_a_cluster_no_node_of_which_answers_is_an_outage_that_passes():
    """runechomq's threads ride it out as they ride out one server away; a
    command across slots is a bug of ours and does not pass."""
    from redis.exceptions import RedisClusterException

    from echomq_django.connection.resilience import passing

    with pytest.raises(RedisClusterException) as away:
        build_client("redis+cluster://127.0.0.1:1?socket_connect_timeout=0.5")
    assert passing(away.value)
    assert not passing(RedisClusterException("BLPOP - all keys must map to the same key slot"))


@pytest.mark.parametrize("url, shown", [
    ("redis://:s3cret@h:6379/0", "redis://:***@h:6379/0"),
    ("redis://app:s3cret@h:6379/0", "redis://app:***@h:6379/0"),
    ("redis://h:6379/0?password=s3cret&socket_timeout=1",
     "redis://h:6379/0?password=***&socket_timeout=1"),
    ("redis+sentinel://app:pw@s1:26379/mymaster?sentinel_password=s3cret",
     "redis+sentinel://app:***@s1:26379/mymaster?sentinel_password=***"),
    ("redis://h:6379/0", "redis://h:6379/0"),
])
def test_redacted_hides_every_password_of_a_url(url, shown):
    assert redacted(url) == shown


def test_sentinels_that_do_not_answer_fail_a_call_at_once():
    """redis-py's default retry held a call about 5 s for each sentinel that
    refused connections (a breaker measured 5.0 s for one, 7.9 s for two)."""
    import socket
    import time

    ports = []
    for _ in range(2):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
    client = build_client(f"redis+sentinel://127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}/mymaster")
    start = time.monotonic()
    with pytest.raises(redis.ConnectionError):  # MasterNotFoundError is one
        client.ping()
    assert time.monotonic() - start < 1.0
