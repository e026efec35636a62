"""``manage.py redisq`` (and ``runworker``) speak with one voice: one-line errors, exit codes, headers, JSON everywhere.

Exit codes (management/cli/out.py): 0 ok, 1 a failure reported, 2 a wrong
command line, 3 Redis unreachable. The Redis-down and usage-error cases run the
real command line in a process of its own (forked from one set-up interpreter,
tests/project/forked.py) against a port nothing listens on, so the exit code and
stderr are what a shell sees.
"""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys

import pytest
from django.core.management import CommandError, call_command

from django_redisq.management.cli.out import clip, table
from tests import helpers
from tests.conftest import ROOT
from tests.project.forked import run_forked
from tests.seed import seed_dead
from tests.testapp import tasks
from tests.worker.test_scheduler import every, with_schedules

# every subcommand, as a user types it (ids that exist nowhere: Redis is asked first, and is down)
SUBCOMMANDS = [
    ("stats",), ("queue",), ("queue", "list"), ("queue", "pause", "default"), ("queue", "resume", "default"),
    ("health",), ("schedules",), ("schedules", "run", "nightly"), ("dead", "list"), ("dead", "show", "x1"),
    ("dead", "replay", "x1"), ("dead", "purge", "x1"), ("dead", "replay", "--all"), ("cancel", "x1"),
]


def free_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def env_for(url: str) -> dict[str, str]:
    return {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.worker_settings", "REDISQ_TEST_REDIS_URL": url,
            "REDISQ_SCHEDULES": json.dumps({"nightly": every(3600)}), "COLUMNS": "120",
            "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def shell(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "django", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("redisq", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


# -- Redis down: one line, exit 3, for every subcommand ----------------------


@pytest.mark.slow
def test_every_subcommand_with_redis_down_prints_one_line_and_exits_3():
    env = env_for(f"redis://:hunter2@127.0.0.1:{free_port()}/0")
    commands = [("redisq", *args) for args in SUBCOMMANDS] + [("redisq", *SUBCOMMANDS[0], "--json"), ("runworker", "--burst")]
    for args, p in zip(commands, run_forked(commands, env, ROOT), strict=True):
        lines = p.stderr.splitlines()
        assert p.returncode == 3, (args, p.returncode, p.stderr)
        assert len(lines) == 1, (args, p.stderr)
        assert lines[0].startswith("CommandError: cannot reach Redis at redis://127.0.0.1:"), (args, lines)
        assert "is Redis running there? check TASKS['default']['OPTIONS']" in lines[0], args
        assert "hunter2" not in p.stdout + p.stderr and "Traceback" not in p.stderr, args
        if "--json" in args:
            assert json.loads(p.stdout) == {"status": "unreachable", "error": lines[0].removeprefix("CommandError: "), "exit_code": 3}
        else:
            assert p.stdout == "", args


@pytest.mark.slow
def test_usage_errors_exit_2_in_one_line_and_never_share_the_code_of_redis_down():
    env = env_for(f"redis://127.0.0.1:{free_port()}/0")  # down: a usage error is found before Redis is asked
    cases = [
        (("redisq", "health", "--max-dead", "x"), "redisq health: error: argument --max-dead: expected a number, got 'x'"),
        (("redisq", "dead", "list", "--limit", "0"), "redisq dead list: error: argument --limit: must be at least 1"),
        (("redisq", "dead", "explode"), "redisq dead: error: argument {list,show,replay,purge}: invalid choice: 'explode'"),
        (("redisq", "stats", "--colour"), "redisq: error: unrecognized arguments: --colour"),
        (("redisq", "stats", "--backend", "nope"), "CommandError: TASKS has no django_redisq backend 'nope'"),
        (("redisq", "dead", "replay"), "CommandError: give dead letter ids, or --all"),
        (("redisq", "cancel", "bad id!"), "CommandError: not task ids"),
        (("runworker", "--concurrency", "0"), "runworker: error: argument --concurrency/-c: must be at least 1"),
        (("runworker", "nope"), "CommandError: queue 'nope' is not in TASKS['default']['QUEUES']"),
        (("runworker", "--backend", "nope"), "CommandError: TASKS has no backend 'nope'"),
    ]
    for (args, line), p in zip(cases, run_forked([args for args, _ in cases], env, ROOT), strict=True):
        assert p.returncode == 2, (args, p.returncode, p.stderr)
        assert len(p.stderr.splitlines()) == 1 and line in p.stderr, (args, p.stderr)


def test_a_queue_the_settings_do_not_name_is_a_usage_error_and_a_missing_id_a_failure(r):
    for args in (("dead", "list", "--queue", "gone"), ("queue", "pause", "gone"), ("health", "--queue", "gone"),
                 ("schedules", "run", "nope")):
        with pytest.raises(CommandError) as e:
            run(*args)
        assert e.value.returncode == 2, args
    for args in (("dead", "show", "nope"), ("dead", "replay", "nope"), ("cancel", "nope")):
        with pytest.raises(CommandError) as e:
            run(*args)
        assert e.value.returncode == 1, args


# -- global options after the subcommand -------------------------------------


@pytest.mark.slow
def test_global_options_after_the_subcommand(r, redis_url):
    env = env_for(redis_url)
    env.pop("DJANGO_SETTINGS_MODULE")
    p = shell(env, "redisq", "dead", "list", "--settings=tests.worker_settings", "--json", "--backend", "default", "-v", "2")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["queue"] == "default"
    p = shell(env, "redisq", "queue", "list", "--settings", "tests.worker_settings", "--traceback")
    assert p.returncode == 0 and p.stdout.startswith("QUEUE"), p.stderr


def test_global_options_before_and_after_mean_the_same(r):
    assert json.loads(run("--json", "queue", "list")) == json.loads(run("queue", "list", "--json")) == json.loads(
        run("queue", "--json"))
    assert json.loads(run("stats", "--json", "--backend", "default"))[0]["queue"] == "default"
    with pytest.raises(CommandError, match="no django_redisq backend 'nope'"):
        run("stats", "--backend", "nope")
    assert not run("--json", "dead", "list", "--json").startswith("ID")  # given twice: still JSON


# -- tables ------------------------------------------------------------------


def test_every_table_has_a_header_row_and_columns_sized_to_content(r, broker):
    seed_dead(broker, "default", 2)
    with with_schedules({"nightly": every(3600)}):
        outputs = {"stats": run("stats"), "queue": run("queue"), "schedules": run("schedules"), "dead list": run("dead", "list"),
                   "cancel": run("cancel", tasks.add.delay(1, 2).id)}
    heads = {"stats": ["QUEUE", "PENDING", "SCHED", "RUNNING", "HELD", "DEAD"], "queue": ["QUEUE", "PENDING", "RUNNING", "HELD", "STATE"],
             "schedules": ["SCHEDULE", "EXPRESSION", "TIMEZONE", "NEXT", "RUN"], "dead list": ["ID", "DIED", "AT", "TASK", "ERROR"],
             "cancel": ["TASK", "ID", "OUTCOME"]}
    for name, text in outputs.items():
        lines = text.splitlines()
        assert lines[0].split()[:len(heads[name])] == heads[name], (name, lines[0])
        first_column = max(len(line.split("  ")[0]) for line in lines[:2])
        assert lines[0][first_column:first_column + 2] == "  ", (name, lines[:2])  # column 1 as wide as its widest cell
        assert "  " not in lines[0][:len(heads[name][0])]
    queue_rows = outputs["queue"].splitlines()
    assert queue_rows[1].split()[:2] == ["default", "0"] and queue_rows[1].index("default") == 0


def test_a_long_message_is_cut_at_a_word_boundary_with_an_ellipsis(r):
    message = "the payment gateway refused order 7 because the card expired last month and nobody told the customer in time"
    helpers.seed_dead(r, "long-1")
    r.hset(helpers.keys().task("long-1"), mapping={"error": message, "exc": "builtins.RuntimeError"})
    row = next(line for line in run("dead", "list").splitlines() if line.startswith("long-1"))
    error = row[row.index("RuntimeError"):]
    assert error.endswith("…") and len(row) <= 120, row
    assert message.startswith(error.removeprefix("RuntimeError: ").removesuffix("…"))
    assert message[len(error.removeprefix("RuntimeError: ").removesuffix("…"))] == " "  # cut before a space: no half word
    assert json.loads(run("dead", "list", "--json"))["items"][0]["error"] == message  # JSON is never cut


def test_clip_and_table():
    assert clip("short", 10) == "short"
    assert clip("one two three four", 12) == "one two…"
    assert clip("x" * 40, 10) == "x" * 9 + "…"  # a single word longer than the column: cut inside it, nothing better
    lines = table(["id", "n", "message"], [["a", 1, "hello world again"], ["bbbb", 22, "x"]], right=[1], fill=2, width=30)
    assert lines == ["ID     N  MESSAGE", "a      1  hello world again", "bbbb  22  x"]
    long = "word " * 20
    lines = table(["id", "message"], [["a", long]], fill=1, width=40)  # the message takes what is left, 30 at least
    assert lines[1] == "a   " + clip(long, 36) and len(lines[1]) <= 40 and lines[1].endswith("word…")
    assert table(["a"], [["\x1b[2J"]])[1] == "\\x1b[2J"  # escaped before it is measured


# -- --json on every subcommand ----------------------------------------------


def test_json_parses_for_every_subcommand(r, broker, make_worker):
    dead = seed_dead(broker, "default", 4)
    running = tasks.add.delay(1, 2).id
    with with_schedules({"nightly": every(3600)}):
        for args in [("stats",), ("topics",), ("queue",), ("queue", "list"), ("queue", "pause", "emails"), ("queue", "resume", "emails"),
                     ("schedules",), ("schedules", "pause", "nightly"), ("schedules", "resume", "nightly"),
                     ("schedules", "run", "nightly"), ("dead", "list"), ("dead", "show", dead[0]), ("dead", "replay", dead[1]),
                     ("dead", "purge", dead[2]), ("dead", "replay", "--all", "--queue", "default"),
                     ("dead", "purge", "--all", "--noinput"), ("cancel", running)]:
            data = json.loads(run(*args, "--json"))
            assert data or data == [], args
    out = io.StringIO()
    call_command("redisq", "health", "--json", stdout=out)
    assert json.loads(out.getvalue())["status"] == "ok"
    out = io.StringIO()
    with pytest.raises(CommandError) as e:  # a failure: the outcomes, one document, exit 1
        call_command("redisq", "cancel", "nope", "--json", stdout=out)
    assert json.loads(out.getvalue()) == {"nope": "missing"} and e.value.returncode == 1
    out = io.StringIO()
    with pytest.raises(CommandError):  # a usage error found by the command: JSON too
        call_command("redisq", "dead", "list", "--queue", "gone", "--json", stdout=out)
    assert json.loads(out.getvalue())["status"] == "usage"


def test_an_error_redis_answers_with_is_one_line_and_exit_1(r):
    r.set(helpers.keys().dead, "not a sorted set")  # another program wrote the key
    for args in (("dead", "list"), ("dead", "list", "--json")):
        out = io.StringIO()
        with pytest.raises(CommandError) as e:
            call_command("redisq", *args, stdout=out, stderr=io.StringIO())
        assert e.value.returncode == 1 and str(e.value).startswith("Redis answered with an error: ResponseError: WRONGTYPE")
        assert "\n" not in str(e.value)
        if "--json" in args:
            assert json.loads(out.getvalue())["status"] == "error"


def test_a_new_family_module_is_two_lines_and_speaks_like_the_others(r, monkeypatch):
    """The hook other subcommands use: a module with add_parser(sub) and run(command, ins, opts), named in FAMILIES.

    Its own ``--json`` (as older modules add) neither clashes with the global one nor resets it when given before.
    """
    import types

    from django_redisq.management.cli import out
    from django_redisq.management.commands import redisq

    probe = types.ModuleType("_probe")

    def add_parser(sub) -> None:
        p = sub.add_parser("probe", help="a test family")
        p.add_argument("--json", action="store_true", help="print JSON")  # its own, as an older module may have it
        p.add_argument("what")

    def probe_run(command, ins, opts) -> None:
        if opts["what"] == "bad":
            raise out.usage("probe: bad what")
        out.emit(command, opts, {"queues": list(ins.queues), "backend": opts["backend"]}, "\n".join(out.table(["queue"], [[q] for q in ins.queues])))

    probe.add_parser, probe.run = add_parser, probe_run
    monkeypatch.setattr(redisq, "FAMILIES", (*redisq.FAMILIES, probe))
    assert json.loads(run("--json", "probe", "x"))["queues"] == ["default", "emails", "low"]
    assert json.loads(run("probe", "x", "--json"))["backend"] == "default"
    assert run("probe", "x").splitlines()[0] == "QUEUE"
    with pytest.raises(CommandError) as e:
        run("probe", "bad")
    assert e.value.returncode == 2
