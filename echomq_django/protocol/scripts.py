"""Load the Lua scripts in ``lua/``, run them, and map their error codes.

Scripts are grouped by area (``lua/jobs/``, ``lua/queues/``, ``lua/repeat/``,
``lua/admin/``, ``lua/presence/``, ``lua/limits/``) and named by their path without the
extension: ``"jobs/ack"`` is ``lua/jobs/ack.lua``. Each opens with a header
naming every KEYS and ARGV entry (``-- KEYS[1] pending ...``) and may pull
shared helpers from ``lua/includes`` with ``-- @include <name>``; an include
names the includes it needs the same way, and each is pasted in once; the
helpers (``local function`` at the start of a line, closed by ``end`` at
the start of a line) that nothing in the script calls are then left out,
since the server runs a script's whole text, definitions included, on every
call. :func:`run` calls a
script by its SHA (EVALSHA, the SHA computed once per process) and sends its
text (SCRIPT LOAD) only when the server answers NOSCRIPT: once per server,
and again after a SCRIPT FLUSH or a restart.
A script may open with a shebang, ``#!lua flags=<flag>,...`` (Redis 7 and
Valkey's script flags; jobs/extend and jobs/progress are ``allow-oom``): it must be the file's
first line, stays first after the includes are pasted in (they come later),
and no include may carry one.
:func:`run` checks the number of keys and arguments against the header, so a
header that drifts from its caller fails loudly, and turns the server's error
codes into the exceptions of :mod:`echomq_django.exceptions`, in one place.
The codes are listed in ``docs/protocol.md`` ("Error codes").
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Sequence

import redis

from .. import exceptions
from ..connection.topology import keyed_command, load_script
from .keyspace import GLOBAL_BASE

_HEADER_ENTRY = re.compile(r"^-- (KEYS|ARGV)\[(\d+)(\.\.\.)?\] (\S+)")
_INCLUDE = re.compile(r"^-- @include (\w+)\s*$", re.MULTILINE)
_SHEBANG = re.compile(r"^#!lua(?: flags=([\w,-]*))?$")
_DEFINITION = re.compile(r"local function (\w+)\(")
_COMMENT_LINE = re.compile(r"^\s*--[^\n]*", re.MULTILINE)
_WORD_RUN = re.compile(r"\w+")

#: Server error code (the first word of the reply) -> exception class.
ERROR_CODES: dict[str, type[Exception]] = {
    "EMQKIND": exceptions.KindError,
    "EMQSTALE": exceptions.StaleTokenError,
    "EMQSTATE": exceptions.StateError,
    "EMQNOJOB": exceptions.NoSuchJobError,
    "EMQKEY": ValueError,
    "EMQARG": ValueError,
}


@dataclass(frozen=True)
class ScriptSource:
    """One script's text (includes expanded) and its header's KEYS and ARGV names."""

    name: str
    text: str
    keys: tuple[str, ...]
    argv: tuple[str, ...]
    #: The flags of the script's shebang (``("allow-oom",)``), () without one.
    flags: tuple[str, ...] = ()
    #: Whether the last KEYS / ARGV entry is a variadic tail, written
    #: ``-- KEYS[9...] job``: it and what follows are zero or more entries.
    keys_variadic: bool = False
    argv_variadic: bool = False

    @property
    def sha(self) -> str:
        """The SHA1 of the text, as EVALSHA names the script."""
        return _sha(self.text)


@cache
def _sha(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


#: The folders of ``lua/`` that hold scripts (``includes/`` holds helpers).
AREAS = ("jobs", "queues", "repeat", "admin", "presence", "limits")


def _lua():
    return resources.files("echomq_django.protocol").joinpath("lua")


def _read(relative: str) -> str:
    return _lua().joinpath(*relative.split("/")).read_text("utf-8")


@cache
def source(name: str) -> ScriptSource:
    """Return the parsed ``lua/<name>.lua`` (``name`` like ``"jobs/ack"``).

    Raises:
        FileNotFoundError: no such script.
        ValueError: the header numbers KEYS or ARGV out of order, or a
            shebang is malformed or not the script's first line.
    """
    raw = _read(f"{name}.lua")
    names: dict[str, list[str]] = {"KEYS": [], "ARGV": []}
    variadic = {"KEYS": False, "ARGV": False}
    for line in raw.splitlines():
        match = _HEADER_ENTRY.match(line)
        if match:
            kind, index, label = match.group(1), int(match.group(2)), match.group(4)
            if index != len(names[kind]) + 1 or variadic[kind]:
                raise ValueError(f"{name}.lua: header {kind}[{index}] is out of order "
                                 "(or follows a variadic tail)")
            names[kind].append(label)
            variadic[kind] = match.group(3) is not None
    text = _unused_helpers_out(_expand(raw, set()))
    first, _, rest = text.partition("\n")
    shebang = _SHEBANG.match(first) if first.startswith("#!") else None
    if (first.startswith("#!") and not shebang) or any(
            line.startswith("#!") for line in rest.splitlines()):
        raise ValueError(f"{name}.lua: a shebang must be the script's first line, "
                         f"as '#!lua flags=<flag>,...'")
    flags = tuple(f for f in (shebang.group(1) or "").split(",") if f) if shebang else ()
    return ScriptSource(name, text, tuple(names["KEYS"]), tuple(names["ARGV"]), flags,
                        variadic["KEYS"], variadic["ARGV"])


def _expand(text: str, done: set[str]) -> str:
    """Paste in every ``-- @include <name>``, the includes' own first (an
    include names what it needs the same way), each include once."""
    def paste(match: re.Match) -> str:
        name = match.group(1)
        if name in done:
            return ""
        done.add(name)
        return _expand(_read(f"includes/{name}.lua"), done)

    return _INCLUDE.sub(paste, text)


def _unused_helpers_out(text: str) -> str:
    """``text`` without the helpers it never calls: a ``local function NAME(``
    line and its body up to the first unindented line, which must be ``end``
    (any other shape is kept), whose NAME appears nowhere else outside comment
    lines. Repeated until none is left, so a helper only a dropped one called
    goes too."""
    while True:
        lines = text.split("\n")
        blocks = []
        i = 0
        while i < len(lines):
            match = _DEFINITION.match(lines[i])
            if match:
                j = i + 1
                while j < len(lines) and (not lines[j] or lines[j][0].isspace()):
                    j += 1
                if j < len(lines) and lines[j] == "end":
                    blocks.append((match.group(1), i, j))
                    i = j
            i += 1
        # A name appears where it is a whole run of word characters (what
        # \bNAME\b matches): one count of every run serves every helper.
        runs = Counter(_WORD_RUN.findall(_COMMENT_LINE.sub("", text)))
        drop = {k for name, first, last in blocks
                if runs[name] == 1 for k in range(first, last + 1)}
        if not drop:
            return text
        text = "\n".join(line for k, line in enumerate(lines) if k not in drop)


def script_names() -> list[str]:
    """Every script in ``lua/<area>/`` as ``"<area>/<name>"``, sorted."""
    return sorted(f"{area}/{p.name[:-4]}" for area in AREAS
                  for p in _lua().joinpath(area).iterdir() if p.name.endswith(".lua"))


def warm_sources() -> None:
    """Build every script's :func:`source` now (about 4 ms each here, 41
    scripts), so no first call of a script pays for it on the hot path: the
    first recurrence a fresh runechomq mints, say, which waits on it. Cached
    for the process; idempotent."""
    for name in script_names():
        source(name)


def _script(client: redis.Redis, name: str):
    """A redis-py ``Script`` of ``name`` on ``client``, for callers that queue
    a script on a pipeline of their own (tests, benchmarks); :func:`run` does
    without one."""
    return client.register_script(source(name).text)


def decode(value: Any) -> Any:
    """Bytes to str, recursively through lists, so callers never see bytes."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def decode_hash(raw: dict) -> dict[str, str]:
    """An HGETALL reply (bytes or str) as a dict of str."""
    return {decode(k): decode(v) for k, v in raw.items()}


def run(client: redis.Redis, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
    """Run script ``name`` atomically on the server and return its decoded reply.

    ``keys`` and ``args`` must match the script's header in number (at
    least the fixed entries before a variadic tail, ``-- KEYS[9...] job``).

    Raises:
        TypeError: ``keys`` or ``args`` do not match the header (a caller bug).
        KindError, StaleTokenError, StateError, NoSuchJobError, ValueError:
            the script returned the matching error code (see ERROR_CODES).
        redis.RedisError: any other server or connection failure.
    """
    src = source(name)
    if not (_fits(len(keys), len(src.keys), src.keys_variadic)
            and _fits(len(args), len(src.argv), src.argv_variadic)):
        raise TypeError(
            f"{name}.lua takes KEYS {list(src.keys)} and ARGV {list(src.argv)}; "
            f"got {len(keys)} keys and {len(args)} args"
        )
    try:
        try:
            reply = _evalsha(client, src.sha, keys, args)
        except redis.exceptions.NoScriptError:
            # The server has not seen the text yet (a new server, a SCRIPT
            # FLUSH, a restart): send it once and call again. A call refused
            # with NOSCRIPT ran nothing, so calling again is safe.
            load_script(client, src.text, [keys[0] if keys else GLOBAL_BASE])
            reply = _evalsha(client, src.sha, keys, args)
    except redis.ResponseError as err:
        raise translate(err) from None
    return reply if type(reply) is int else decode(reply)


def _evalsha(client: Any, sha: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
    """EVALSHA on ``client``. A plain ``redis.Redis`` without a retry policy
    (what ``get_connection`` builds) is called through its pool directly:
    redis-py's command layer (argument filtering, reply callbacks, events)
    costs more than the call itself on the consumer's hot path, and EVALSHA
    has no reply callback to lose. Any other client (a subclass, a cluster,
    one that retries) goes through its own ``evalsha``."""
    pool = getattr(client, "connection_pool", None)
    if type(client) is not redis.Redis or pool is None or client.get_retry() is not None:
        return client.evalsha(sha, len(keys), *keys, *args)
    conn = pool.get_connection()
    try:
        conn.send_command("EVALSHA", sha, len(keys), *keys, *args)
        return conn.read_response()
    except (redis.ConnectionError, redis.TimeoutError):
        conn.disconnect()   # a half-read reply must never reach the next caller
        raise
    finally:
        pool.release(conn)


def run_many(client: redis.Redis, name: str,
             calls: Sequence[tuple[Sequence[str], Sequence[Any]]]) -> list[Any]:
    """Run script ``name`` once per ``(keys, args)`` of ``calls``, in order, in
    one round trip (a pipeline without MULTI: each call is atomic on its own,
    and other clients' commands may run between them). Returns the decoded
    replies in order.

    A call the server refuses with NOSCRIPT ran nothing: the text is sent and
    those calls alone run again (a second round trip, once per server).

    Raises:
        TypeError: a call's ``keys`` or ``args`` do not match the header.
        KindError, StaleTokenError, StateError, NoSuchJobError, ValueError:
            the first call that failed returned that error code (the calls
            after it have run all the same).
        redis.RedisError: any other server or connection failure.
    """
    return run_pipelined(client, name, calls)[0]


def run_pipelined(client: redis.Redis, name: str,
                  calls: Sequence[tuple[Sequence[str], Sequence[Any]]],
                  then: Sequence[Any] | None = None) -> tuple[list[Any], Any]:
    """:func:`run_many`, and the command ``then`` (e.g. ``("WAIT", 1, 200)``)
    queued after the calls in the same pipeline, on the same connection, and
    sent again with the calls a NOSCRIPT repeats. Returns ``(replies, then's
    reply)``, the latter None without ``then``. Raises as :func:`run_many`,
    and what ``then`` raised after that."""
    src = source(name)
    for keys, args in calls:
        if not (_fits(len(keys), len(src.keys), src.keys_variadic)
                and _fits(len(args), len(src.argv), src.argv_variadic)):
            raise TypeError(f"{name}.lua takes KEYS {list(src.keys)} and ARGV {list(src.argv)}; "
                            f"got {len(keys)} keys and {len(args)} args")
    replies: list[Any] = [None] * len(calls)
    todo = list(range(len(calls)))
    last = None
    for attempt in range(2):
        pipe = client.pipeline(transaction=False)
        for i in todo:
            keys, args = calls[i]
            # (keyed_command: a cluster pipeline refuses the evalsha method.)
            keyed_command(pipe, keys[0] if keys else GLOBAL_BASE,
                          "EVALSHA", src.sha, len(keys), *keys, *args)
        if then is not None:
            pipe.execute_command(*then)
        answers = pipe.execute(raise_on_error=False)
        if then is not None:
            *answers, last = answers
        missing = [i for i, answer in zip(todo, answers)
                   if isinstance(answer, redis.exceptions.NoScriptError)]
        for i, answer in zip(todo, answers):
            replies[i] = answer
        if not missing or attempt:
            break
        load_script(client, src.text,
                    [calls[i][0][0] if calls[i][0] else GLOBAL_BASE for i in missing])
        todo = missing
    for reply in replies:
        if isinstance(reply, redis.ResponseError):
            raise translate(reply) from None
        if isinstance(reply, Exception):
            raise reply
    if isinstance(last, Exception):
        raise last
    return [decode(reply) for reply in replies], last


def _fits(given: int, named: int, variadic: bool) -> bool:
    return given >= named - 1 if variadic else given == named


def translate(err: redis.ResponseError) -> Exception:
    """Map a server error reply to the exception for its EMQ code (or return it)."""
    message = str(err)
    code = message.split(" ", 1)[0]
    cls = ERROR_CODES.get(code)
    if cls is None:
        return err
    return cls(message.split(" ", 1)[1] if " " in message else message)
