"""connection: URL forms, CACHE pool sharing, caching, fork safety; all on real servers."""

import os
import uuid

import django_redis
import pytest
import redis
from django.core.cache import caches
from django.test import override_settings

from echomq_django.connection import get_connection, reset_connection
from echomq_django.connection.topology import is_cluster
from echomq_django.exceptions import ConfigurationError
from tests.nodes import on_cluster, primaries


def test_redis_url_reaches_the_test_server(conn, redis_client, valkey_url, queue):
    assert conn is get_connection()  # one client per process
    if is_cluster(conn):   # every primary the client knows is one the URL names
        assert {f"{n.host}:{n.port}" for n in conn.get_primaries()} \
            == set(valkey_url.split("://", 1)[1].split(","))
    else:
        kwargs = conn.connection_pool.connection_kwargs
        assert f"{kwargs['host']}:{kwargs['port']}" in valkey_url
    conn.set(f"emq:{{{queue}}}:probe", "1", px=60000)
    assert redis_client.get(f"emq:{{{queue}}}:probe") == "1"
    # decode_responses is not forced: replies are bytes by default.
    assert conn.get(f"emq:{{{queue}}}:probe") == b"1"


def test_connection_kwargs_are_passed_to_redis_py(valkey_url, redis_client):
    name = "emq-test-" + uuid.uuid4().hex[:8]
    with override_settings(
        ECHOMQ={"URL": valkey_url, "CONNECTION_KWARGS": {"decode_responses": True, "client_name": name}}
    ):
        client = get_connection()
        assert client.ping() is True
        assert primaries(client)[0].client_getname() == name
        assert isinstance(primaries(client)[0].echo("x"), str)
        assert name in [c["name"] for node in primaries(redis_client) for c in node.client_list()]


def test_unix_socket_url_with_db(start_valkey, tmp_path):
    url, _proc = start_valkey(unixsocket=tmp_path / "v.sock")
    with override_settings(ECHOMQ={"URL": url.replace("db=0", "db=3")}):
        client = get_connection()
        assert isinstance(client.connection_pool.get_connection(), redis.UnixDomainSocketConnection)
        client.set("k", "v")
    direct = redis.Redis(unix_socket_path=str(tmp_path / "v.sock"), db=3)
    assert direct.get("k") == b"v"
    assert redis.Redis(unix_socket_path=str(tmp_path / "v.sock"), db=0).get("k") is None
    direct.close()


def test_cache_alias_shares_the_cache_pool(valkey_url, start_valkey, queue):
    # django-redis's LOCATION names one server: on a cluster session, a
    # throwaway one.
    if on_cluster(valkey_url):
        valkey_url, _proc = start_valkey()
    cache_settings = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "echomq": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": valkey_url},
    }
    with override_settings(CACHES=cache_settings, ECHOMQ={"CACHE": "echomq"}):
        client = get_connection()
        assert client is django_redis.get_redis_connection("echomq")
        assert client.connection_pool is caches["echomq"].client.get_client(write=True).connection_pool
        caches["echomq"].set(f"{queue}-probe", 42, timeout=60)
        assert client.exists(caches["echomq"].make_key(f"{queue}-probe")) == 1


def test_settings_change_rebuilds_the_client(valkey_url, start_valkey):
    before = get_connection()
    other_url, _proc = start_valkey()
    with override_settings(ECHOMQ={"URL": other_url}):
        inside = get_connection()
        assert inside is not before
        assert inside.connection_pool.connection_kwargs["port"] == int(other_url.rsplit(":", 1)[1].split("/")[0])
        assert inside.ping()
    after = get_connection()
    assert after is not inside
    assert _ports(after) == _ports(before)


def _ports(client) -> list[int]:
    """The port of every primary ``client`` reaches (one, off a cluster)."""
    return [node.connection_pool.connection_kwargs["port"] for node in primaries(client)]


def test_reset_connection_builds_a_new_client():
    first = get_connection()
    reset_connection()
    second = get_connection()
    assert second is not first
    assert second.ping()


def test_invalid_settings_raise_configuration_error():
    with override_settings(ECHOMQ={"URL": "http://nope"}):
        with pytest.raises(ConfigurationError, match="echomq.E004"):
            get_connection()


def test_forked_child_builds_its_own_client(conn):
    # On a cluster, the first primary's connections (client ids are per node).
    conn.ping()
    parent_id = primaries(conn)[0].client_id()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report through the pipe, never return into pytest
        code = 1
        try:
            os.close(read_fd)
            child = get_connection()
            assert child is not conn
            assert {id(node.connection_pool) for node in primaries(child)}.isdisjoint(
                id(node.connection_pool) for node in primaries(conn))
            assert child.ping()
            child_id = primaries(child)[0].client_id()
            os.write(write_fd, str(child_id).encode())
            code = 0 if child_id != parent_id else 2
        except BaseException as exc:  # noqa: BLE001 - any failure becomes the exit code
            os.write(write_fd, repr(exc).encode())
        finally:
            os._exit(code)
    os.close(write_fd)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(read_fd) as fh:
        report = fh.read()
    assert os.waitstatus_to_exitcode(status) == 0, report
    assert int(report) != parent_id
    # The parent's client and its socket are untouched by the child.
    assert get_connection() is conn
    assert primaries(conn)[0].client_id() == parent_id


@pytest.mark.parametrize("make, described", [
    (lambda: redis.Redis.from_url("rediss://ops:s3cret@db.example.invalid:6380/3"),
     "rediss://ops@db.example.invalid:6380/3"),
    (lambda: redis.Redis(host="db.example.invalid", port=6390, db=2, ssl=True, password="x"),
     "rediss://db.example.invalid:6390/2"),
    (lambda: redis.Redis.from_url("redis://:s3cret@db.example.invalid:6379/1"),
     "redis://db.example.invalid:6379/1"),
])
def test_describe_says_rediss_for_tls_and_never_connects(make, described):
    from echomq_django.connection import describe

    client = make()
    # db.example.invalid never resolves: a describe that connected would raise.
    assert describe(client) == described
    assert "s3cret" not in describe(client)
