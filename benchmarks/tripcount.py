"""Counting what a worker asks of the server: commands (INFO commandstats) and round trips (a proxy).

**Commands.** :func:`commandstats` reads ``INFO commandstats``: calls per
command since the server started, the commands that scripts run counted too
(``evalsha`` once, plus each ``redis.call`` inside it). A delta between two
readings, less the commands the reader itself sent in between
(:class:`Reader` counts them), is what the worker asked for.

**Round trips.** :class:`CountingProxy` is a TCP proxy on a free loopback
port in front of the server. A worker pointed at it (``BENCH_REDIS_URL``)
talks to the server through it, and the proxy counts, per connection, the
request bursts: bytes from the client after the server last sent something
(or on a new connection) open a new round trip; more bytes before the reply
belong to the same one. A pipeline (MULTI/EXEC included) is one round trip;
a blocking command is one, however long it blocks; each script call is one.
It cannot see a round trip a client never makes, and it would split one
huge pipeline whose first replies arrive before its last bytes are sent
(none of the no-op workloads here sends one that large). The proxy adds a
hop (two socket copies in Python per message), so it is used only for the
counting drains; :func:`proxy_cost_us` measures what it adds per round trip.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time

__all__ = ["CountingProxy", "Reader", "commandstats", "proxy_cost_us"]


def commandstats(conn) -> dict[str, int]:
    """Calls per command (``{"evalsha": 12, "zadd": 30, ...}``) since the server started."""
    raw = conn.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(row["calls"]) for name, row in raw.items()}


class Reader:
    """Reads the server's command counts and subtracts its own traffic.

    Every call the benchmark makes through :meth:`get` or :meth:`snapshot`
    while a worker is measured is counted here, so :meth:`delta` is the
    worker's alone.
    """

    def __init__(self, conn) -> None:
        self.conn = conn
        self.gets = 0
        self._base: dict[str, int] = {}

    def get(self, key: str):
        self.gets += 1
        return self.conn.get(key)

    def snapshot(self) -> None:
        """Start counting from now."""
        self.gets = 0
        self._base = commandstats(self.conn)

    def delta(self) -> int:
        """Commands the server ran since :meth:`snapshot`, less this reader's
        own (its GETs and the snapshot's INFO; an INFO reply does not count
        the INFO that reads it)."""
        now = commandstats(self.conn)
        total = sum(now.values()) - sum(self._base.values())
        return total - self.gets - 1


class _Pipe:
    """One client connection and its upstream connection."""

    __slots__ = ("client", "upstream", "client_spoke_last")

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client, self.upstream = client, upstream
        self.client_spoke_last = False


class CountingProxy:
    """A loopback TCP proxy to ``host:port`` counting round trips (module doc).

    ``url`` is the proxy's own ``redis://`` URL (db 0). ``trips`` and
    ``connections`` count since :meth:`reset`. Runs on a daemon thread until
    :meth:`close`, which closes every socket it opened.
    """

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.listener.setblocking(False)
        self.url = f"redis://127.0.0.1:{self.listener.getsockname()[1]}/0"
        self.trips = 0
        self.connections = 0
        self._lock = threading.Lock()
        self._pipes: set[_Pipe] = set()
        self._stop = threading.Event()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.listener, selectors.EVENT_READ, None)
        self._thread = threading.Thread(target=self._loop, name="counting-proxy", daemon=True)
        self._thread.start()

    def reset(self) -> None:
        with self._lock:
            self.trips = self.connections = 0

    def counts(self) -> tuple[int, int]:
        """``(round trips, connections)`` since :meth:`reset`."""
        with self._lock:
            return self.trips, self.connections

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for pipe in list(self._pipes):
            self._drop(pipe)
        self._selector.close()
        self.listener.close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._selector.select(0.1):
                if key.data is None:
                    self._accept()
                else:
                    pipe, from_client = key.data
                    if pipe in self._pipes:
                        self._forward(pipe, from_client)

    def _accept(self) -> None:
        try:
            client, _ = self.listener.accept()
        except BlockingIOError:
            return
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            client.close()
            return
        for sock in (client, upstream):
            # Without TCP_NODELAY the extra hop would add Nagle's delay to
            # every small write; the sockets block on send (see _forward).
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(None)
        pipe = _Pipe(client, upstream)
        self._pipes.add(pipe)
        self._selector.register(client, selectors.EVENT_READ, (pipe, True))
        self._selector.register(upstream, selectors.EVENT_READ, (pipe, False))
        with self._lock:
            self.connections += 1

    def _forward(self, pipe: _Pipe, from_client: bool) -> None:
        source, sink = (pipe.client, pipe.upstream) if from_client else (pipe.upstream, pipe.client)
        try:
            data = source.recv(262144)
            if data:
                # A blocking sendall: the peers here read promptly, and the
                # replies of no-op workloads are small.
                sink.sendall(data)
        except OSError:
            data = b""
        if not data:
            self._drop(pipe)
            return
        if from_client:
            if not pipe.client_spoke_last:
                with self._lock:
                    self.trips += 1
            pipe.client_spoke_last = True
        else:
            pipe.client_spoke_last = False

    def _drop(self, pipe: _Pipe) -> None:
        self._pipes.discard(pipe)
        for sock in (pipe.client, pipe.upstream):
            try:
                self._selector.unregister(sock)
            except (KeyError, ValueError):
                pass
            sock.close()


def proxy_cost_us(direct_url: str, proxy: CountingProxy,
                  calls: int = 2000) -> tuple[float, float, int]:
    """``(µs per PING direct, µs per PING through the proxy, round trips the
    proxy counted for the timed PINGs)``: ``calls`` PINGs from one connected
    client each way. The count must equal ``calls`` (the counting's check)."""
    import redis

    timings, trips = [], 0
    for url in (direct_url, proxy.url):
        client = redis.Redis.from_url(url)
        try:
            client.ping()  # connect (HELLO, CLIENT SETINFO) before counting and timing
            proxy.reset()
            started = time.perf_counter()
            for _ in range(calls):
                client.ping()
            timings.append((time.perf_counter() - started) / calls * 1e6)
            trips, _ = proxy.counts()
        finally:
            client.close()
    return timings[0], timings[1], trips
