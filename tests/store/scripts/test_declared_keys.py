"""Every script touches only keys it declares in KEYS, or keys it derives inside its queue's slot from a prefix it is given.

How it is proved. No server we run enforces the rule (Redis 7 and Valkey 9 check,
on a Cluster and for a script with a ``#!lua`` shebang, that a key hashes to a
declared slot, not that it was declared; Dragonfly refuses any undeclared key).
So the test compares what each script touched with what it was passed: it starts
a server of its own, listens to it with ``MONITOR``, and runs this directory's
script tests against it in a subprocess (one server, no Cluster; ``RECORDED``). MONITOR prints
each ``EVAL``/``EVALSHA`` with its arguments and then, one line each, the
commands the script ran (``[0 lua] "HGET" ...``): a script runs atomically, so
every ``lua`` line belongs to the script call printed just before it. The keys
of each such command are what the server itself says they are (``COMMAND
GETKEYS``), not a guess at argument positions.

The rule held, per script call: every key touched is in its KEYS, or it is
*derived*: built from a key prefix the call passed in ARGV (``P:`` =
``redisq:{<queue>}:``, a workflow's or a topic's) and carrying that prefix's hash
tag, or the ``<key>:corrupt`` twin lib/types.lua sets a declared key of the wrong
type aside to. Derived keys cannot be declared by the caller (``fetch`` learns a task's id
only when it pops it, ``P:t:<id>``), which is what the style guide prescribes and
what Dragonfly's ``allow-undeclared-keys`` script flag is for; they stay in the
slot the call declared, so a Cluster (and the cluster cases beside this file)
serves them. A key of neither kind, or a derived key of a family the key table
of keys.py does not name, fails the test. Every script of ``scripts.NAMES`` must have
run at least once, so the proof covers them all (lib/ includes are spliced into
the scripts that use them, and run as theirs).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from hashlib import sha1
from pathlib import Path

import pytest
import redis

from django_redisq.store import keys, scripts
from django_redisq.testing import RedisServer
from tests.conftest import ROOT, _server_binary

pytestmark = pytest.mark.slow

RECORDED = (str(Path(__file__).parent), str(ROOT / "tests" / "store" / "test_plain_enqueue.py"))
"""The tests whose script calls are recorded: this directory's, and enqueue_again.lua's (store/broker/plain.py)."""
NESTED = "REDISQ_TEST_DECLARED_KEYS"
"""Set in the subprocess, which must not run this test again."""
ARG = re.compile(r'"((?:[^"\\]|\\.)*)"')
ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "a": "\a", "b": "\b", "\\": "\\", '"': '"'}
TAG = re.compile(r"\{([^}]*)\}")
SET_ASIDE = ":corrupt"
"""lib/types.lua's ``set_aside`` renames a declared key of the wrong type to ``<key>:corrupt``: derived from a declared
key, in its slot (the name holds its hash tag)."""


def unquote(text: str) -> str:
    """An argument as MONITOR printed it (``sdscatrepr``), back to its text."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "x":
                out.append(chr(int(text[i + 2:i + 4], 16)))
                i += 4
                continue
            out.append(ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


@dataclass
class Call:
    """One script call as MONITOR saw it, and the commands it ran."""

    name: str
    keys: list[str]
    argv: list[str]
    commands: list[list[str]] = field(default_factory=list)


class Monitor:
    """A MONITOR connection read by a thread of its own until ``stop``."""

    def __init__(self, port: int) -> None:
        self.lines: list[str] = []
        self.conn = redis.Connection(port=port, decode_responses=True, encoding_errors="surrogateescape", socket_timeout=None)
        self.conn.send_command("MONITOR")
        assert self.conn.read_response() == "OK"
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while True:
            line = self.conn.read_response()
            if "redisq-monitor-end" in line:
                return
            self.lines.append(line)

    def stop(self, client: redis.Redis) -> None:
        client.echo("redisq-monitor-end")
        self.thread.join(30)
        assert not self.thread.is_alive(), "MONITOR did not see the end marker"
        self.conn.disconnect()


def script_calls(lines: list[str]) -> list[Call]:
    """The script calls in MONITOR's lines, each with the commands it ran."""
    by_sha = {sha1(scripts.source(name).encode()).hexdigest(): name for name in scripts.NAMES}
    calls: list[Call] = []
    current: Call | None = None
    for line in lines:
        args = [unquote(a) for a in ARG.findall(line)]
        if not args:
            continue
        if " lua] " in line:
            if current is not None:
                current.commands.append(args)
            continue
        current = None
        verb = args[0].lower()
        if verb in ("eval", "evalsha") and len(args) >= 3:
            sha = args[1] if verb == "evalsha" else sha1(args[1].encode()).hexdigest()
            name = by_sha.get(sha)
            if name is not None:
                n = int(args[2])
                current = Call(name, args[3:3 + n], args[3 + n:])
                calls.append(current)
    return calls


def in_key_table(fam: str) -> bool:
    """Whether keys.py's key table (its docstring) names the family: ``P:t``, ``W:deps``, ``T:stream`` ..."""
    return re.search(rf"\b[A-Z]:{re.escape(fam)}\b", keys.__doc__ or "") is not None


def family(key: str, prefix: str) -> str:
    """The first word after the prefix a derived key was built from: ``P:t:<id>`` -> ``t``, ``P:slots:<path>`` -> ``slots``."""
    return re.split(r"[:{]", key[len(prefix):], maxsplit=1)[0]


def verdict(call: Call, touched: set[str]) -> list[str]:
    """What is wrong with one call: keys neither declared nor derived in the declared slot from an ARGV prefix."""
    tags = {m.group(1) for k in call.keys if (m := TAG.search(k))}
    prefixes = sorted((a for a in call.argv if TAG.search(a) and a.endswith(":")), key=len, reverse=True)
    wrong = []
    for key in sorted(touched - set(call.keys)):
        if key.endswith(SET_ASIDE) and key[:-len(SET_ASIDE)] in call.keys:
            continue  # a declared key of the wrong type, set aside by lib/types.lua
        m = TAG.search(key)
        prefix = next((p for p in prefixes if key.startswith(p)), None)
        if prefix is None or m is None or (tags and m.group(1) not in tags):
            wrong.append(f"{call.name}: undeclared key {key!r} (KEYS {call.keys}, ARGV {call.argv[:4]}...)")
    return wrong


@pytest.mark.skipif(bool(os.environ.get(NESTED)), reason="the recorded run itself")
def test_every_script_touches_only_its_declared_keys_or_keys_derived_in_its_slot(tmp_path: Path) -> None:
    binary = _server_binary()
    if not binary:
        pytest.skip("no redis-server")
    with RedisServer(binary) as server:
        client = redis.Redis(port=server.port, decode_responses=True)
        monitor = Monitor(server.port)
        env = {**os.environ, NESTED: "1", "REDISQ_TEST_REDIS_URL": server.url, "REDISQ_TEST_TOPOLOGY": "single"}
        run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not cluster",
                              "-x", *RECORDED], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        monitor.stop(client)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        calls = script_calls(monitor.lines)
        getkeys: dict[tuple[str, ...], tuple[str, ...]] = {}

        def keys_of(command: list[str]) -> tuple[str, ...]:
            sig = tuple(command)
            if sig not in getkeys:
                try:
                    getkeys[sig] = tuple(client.command_getkeys(*command))
                except redis.ResponseError:
                    # a command without keys (TIME): GETKEYS refuses it; anything else is a failure of this test
                    (info,) = client.execute_command("COMMAND", "INFO", command[0]).values()
                    assert info["first_key_pos"] == 0, f"COMMAND GETKEYS refused {command[:6]}"
                    getkeys[sig] = ()
            return getkeys[sig]

        wrong: list[str] = []
        derived: dict[str, set[str]] = defaultdict(set)
        for call in calls:
            touched = {k for command in call.commands for k in keys_of(command)}
            wrong += verdict(call, touched)
            for key in touched - set(call.keys):
                prefix = next((p for p in call.argv if p.endswith(":") and key.startswith(p)), None)
                if prefix:
                    derived[call.name].add(family(key, prefix))
        client.close()
    assert not sorted(set(wrong))[:20]
    assert set(scripts.NAMES) - {c.name for c in calls} == set(), "scripts no test called"
    unknown = {name: sorted(f for f in fams if not in_key_table(f)) for name, fams in derived.items()}
    assert {k: v for k, v in unknown.items() if v} == {}, "derived keys of a family keys.py's key table does not name"
    assert derived["fetch"] >= {"t"}, "the recording saw no derived key (fetch reads P:t:<id>)"
