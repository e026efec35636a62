"""``manage.py redisq``: stats and dead letters from a shell, as text and as JSON."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from django_redisq.ops import operations
from tests import helpers
from tests.seed import seed_dead
from tests.testapp import tasks


def run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("redisq", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def run_json(*args: str):
    return json.loads(run(*args, "--json")[0])


@pytest.fixture
def dead(r, make_worker) -> str:
    result = tasks.always_fails.delay("kaput")
    make_worker().run()
    return result.id


def test_stats(r, dead):
    tasks.add.delay(1, 2)
    text, _ = run("stats")
    assert text.splitlines()[1].split()[:6] == ["default", "1", "0", "0", "0", "1"] and "no workers" in text  # running, held, dead
    data = run_json("stats")
    assert [q["queue"] for q in data] == ["default", "emails", "low"]
    assert (data[0]["pending"], data[0]["dead"], data[0]["failed_hour"], len(data[0]["series"])) == (1, 1, 2, 60)


def test_stats_lists_workers(r):
    r.zadd(helpers.keys().workers, {"w1": helpers.redis_ms(r)})
    r.set(helpers.keys().worker_info("w1"), json.dumps({"host": "box", "pid": 7, "queues": ["default"], "concurrency": 2,
                                                        "pool": "processes"}))
    lines = run("stats")[0].splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("WORKER"))
    assert lines[header].split()[:6] == ["WORKER", "HOST", "PID", "QUEUES", "POOL", "CONCURRENCY"]
    assert lines[header + 1].split()[:6] == ["w1", "box", "7", "default", "processes", "2"]


def test_a_worker_without_its_record_is_a_row_of_dashes_that_says_why(r):
    """A stopped worker's record is gone before its row in the workers set: no ``None`` cells."""
    r.zadd(helpers.keys().workers, {"gone.1": helpers.redis_ms(r)})
    lines = run("stats")[0].splitlines()
    row = lines[next(i for i, line in enumerate(lines) if line.startswith("WORKER")) + 1]
    assert row.split()[:6] == ["gone.1", "-", "-", "-", "-", "-"] and "None" not in row, row
    assert row.endswith("(stopped: no worker record)"), row


def test_dead_list(r, broker, dead):
    text, _ = run("dead", "list")
    assert dead in text and "tests.testapp.tasks.always_fails" in text and "ValueError: kaput" in text
    assert "1 dead letter(s) in queue default" in text
    data = run_json("dead", "list")
    assert [i["id"] for i in data["items"]] == [dead] and data["total"] == 1 and data["next_start"] is None
    assert run("dead", "list", "--queue", "emails")[0].strip() == "no dead letters in queue emails"  # said once


def test_dead_list_filters_and_pages(r, broker):
    ids = seed_dead(broker, "default", 30, lambda i: ("shop.tasks.a", "builtins.KeyError" if i % 2 else "builtins.OSError", f"e{i}"))
    text, _ = run("dead", "list", "--limit", "5")
    assert "more: --start 5" in text and len([line for line in text.splitlines() if line.startswith(tuple(ids))]) == 5
    data = run_json("dead", "list", "--exc", "KeyError", "--limit", "100")
    assert {i["id"] for i in data["items"]} == set(ids[1::2]) and data["total"] is None
    assert [i["id"] for i in run_json("dead", "list", "--search", "E17")["items"]] == [ids[17]]
    assert "match" in run("dead", "list", "--task", "nothing")[0]


def test_dead_show(r, dead):
    text, _ = run("dead", "show", dead)
    assert f"id:        {dead}" in text and 'args:      ["kaput"]' in text and text.count("Traceback (most recent call last)") == 2
    data = run_json("dead", "show", dead, "--queue", "default")
    assert data["args"] == ["kaput"] and len(data["attempts"]) == 2 and data["row"]["queue"] == "default"


def test_dead_show_of_an_undecodable_message(r):
    helpers.seed_dead(r, "bad-1")
    r.hset(helpers.keys().task("bad-1"), "msg", "{oops")
    assert "does not decode" in run("dead", "show", "bad-1")[0]


TERMINAL_ATTACK = "\x1b]0;PWNED\x07\x1b[2J\x1b[31m"  # retitles the terminal, clears the screen, turns it red
RAW_CONTROLS = ("\x1b", "\x07", "\x9b", "\x7f", "\r", "\udcff")  # ESC, BEL, C1 CSI, DEL, CR, a lone surrogate


def assert_no_raw_controls(text: str) -> None:
    for c in RAW_CONTROLS:
        assert c not in text, f"{c!r} printed raw in {text[:300]!r}"


@pytest.fixture
def evil_dead(r) -> list[str]:
    """Dead letters whose id, task, exception, message, traceback and stored message carry terminal escapes."""
    ids = ["evil-1", "evil-2\x1b[2J\x07"]
    for task_id in ids:
        helpers.seed_dead(r, task_id)
        errors = [{"exc": f"builtins.ValueError{TERMINAL_ATTACK}", "msg": f"{TERMINAL_ATTACK}boom\x9b31m\x7f\r", "at": 1,
                   "tb": f"Traceback (most recent call last):\n  File \"x.py\", line 1\x1b[2K\x07\nValueError: {TERMINAL_ATTACK}"}]
        r.hset(helpers.keys().task(task_id), mapping={
            "task": f"tests.testapp.tasks.add{TERMINAL_ATTACK}", "exc": errors[0]["exc"], "error": errors[0]["msg"],
            "errors": json.dumps(errors, ensure_ascii=False), "reason": f"failed{TERMINAL_ATTACK}", "workers": f"w1{TERMINAL_ATTACK}",
            "msg": json.dumps({"v": 1, "args": [TERMINAL_ATTACK], "kwargs": {"k": "\x1b"}})})
    r.hset(helpers.keys().task(ids[1]), "msg", f"{{not json{TERMINAL_ATTACK}\n".encode() + b"\xff")  # undecodable, not UTF-8
    r.hset(helpers.keys().task(ids[1]), "task", b"tests.testapp.tasks.add\xff" + TERMINAL_ATTACK.encode())
    return ids


def test_dead_list_and_show_escape_control_characters(r, evil_dead):
    """A task's error message can rewrite the operator's terminal: list and show print escapes, not the characters."""
    text, _ = run("dead", "list")
    assert_no_raw_controls(text)
    assert "\\x1b]0;PWNED\\x07" in text and "evil-2\\x1b[2J\\x07" in text and "\\udcff" in text
    assert len(text.splitlines()) == 4  # the header, two dead letters and the total: no field adds a line
    for task_id in evil_dead:
        text, _ = run("dead", "show", task_id)
        assert_no_raw_controls(text)
        assert "\\x1b]0;PWNED\\x07" in text and "Traceback (most recent call last):\n  File" in text  # its lines kept
        assert f"id:        {task_id.encode('unicode_escape').decode()}" in text
    assert "message:   " in run("dead", "show", evil_dead[1])[0]
    data = run_json("dead", "show", evil_dead[0])  # JSON escapes by itself and keeps the text as it is
    assert data["row"]["task"] == f"tests.testapp.tasks.add{TERMINAL_ATTACK}"


def test_other_subcommands_escape_what_redis_holds(r):
    r.zadd(helpers.keys().workers, {f"w{TERMINAL_ATTACK}": helpers.redis_ms(r)})
    r.set(helpers.keys().worker_info(f"w{TERMINAL_ATTACK}"), json.dumps({
        "host": f"box{TERMINAL_ATTACK}\nfake line", "pid": 7, "queues": ["default"], "concurrency": 2, "pool": f"threads{TERMINAL_ATTACK}"}))
    r.set(helpers.keys().paused, f"1000|ops{TERMINAL_ATTACK}\nfake line")
    for args in (("stats",), ("queue",), ("health",), ("queue", "resume", "default")):
        out = io.StringIO()
        try:
            call_command("redisq", *args, stdout=out, stderr=io.StringIO())
        except SystemExit:  # health exits 1 on a breach; what it printed is checked all the same
            pass
        text = out.getvalue()
        assert "ops" in text or "box" in text or args == ("queue", "resume", "default"), (args, text)
        assert_no_raw_controls(text)
        assert "\nfake line" not in text, args


@pytest.mark.parametrize("args, message", [
    (("dead", "show", "nope"), "no dead letter 'nope' in any configured queue"),
    (("dead", "show", "nope", "--queue", "emails"), "no dead letter 'nope' in queue 'emails'"),
    (("dead", "list", "--queue", "gone"), "queue 'gone' is not in TASKS"),
    (("dead", "replay"), "give dead letter ids, or --all"),
    (("dead", "replay", "x", "--all"), "not both"),
    (("dead", "replay", "x", "--task", "t"), "go with --all"),
    (("dead", "replay", "nope"), "not dead letters of any configured queue: nope"),
    (("dead", "replay", "--all", "--queue", "gone"), "queue 'gone' is not in TASKS"),
    (("dead", "replay", "--all", "--to", "gone"), "queue 'gone' is not in TASKS"),
    (("--backend", "nope", "stats"), "no django_redisq backend 'nope'"),
    (("dead", "explode"), "invalid choice"),
    (("dead", "list", "--limit", "0"), "must be at least 1"),
])
def test_bad_input_is_a_clear_command_error(r, args, message):
    with pytest.raises(CommandError, match=message):
        run(*args)


def test_replay_ids_finds_their_queues(r, broker, make_worker):
    a = seed_dead(broker, "default", 2)
    b = seed_dead(broker, "emails", 1)
    text, _ = run("dead", "replay", *a, *b)
    assert text.startswith("replayed 3 dead letter(s)")
    assert r.llen(helpers.keys().pending) == 2 and r.llen(helpers.keys("emails").pending) == 1


def test_replay_into_another_queue_as_json(r, dead):
    data = run_json("dead", "replay", dead, "--to", "low")
    assert (data["done"], data["to"], data["by_queue"]) == (1, "low", {"default": 1})
    assert helpers.where_is(r, dead, "low") == ["pending"]


def test_replay_all_matching_shows_progress(r, broker, monkeypatch):
    monkeypatch.setattr(operations, "BATCH", 10)
    ids = seed_dead(broker, "default", 45, lambda i: ("shop.tasks.a", "builtins.KeyError" if i < 40 else "builtins.OSError", "x"))
    text, err = run("dead", "replay", "--all", "--exc", "KeyError")
    assert text.startswith("replayed 40 dead letter(s)")
    assert "[" + "#" * 30 + "] 40/40 replayed" in err
    assert sorted(r.zrange(helpers.keys().dead, 0, -1)) == sorted(ids[40:])


def test_purge(r, broker):
    a = seed_dead(broker, "default", 3)
    seed_dead(broker, "emails", 2)
    assert run("dead", "purge", a[0])[0].startswith("deleted 1 dead letter(s)")
    data = run_json("dead", "purge", "--all", "--noinput")
    assert data["done"] == 2 and data["by_queue"] == {"default": 2}
    assert r.zcard(helpers.keys().dead) == 0 and r.zcard(helpers.keys("emails").dead) == 2


@pytest.mark.parametrize(("stdin", "refusal"), [("", "stdin is empty"), ("no\n", "purge cancelled"), (None, "stdin is empty")],
                         ids=["empty-stdin", "answered-no", "stdin-unreadable"])
def test_purge_all_without_noinput_asks_even_without_a_terminal(r, broker, monkeypatch, stdin, refusal):
    seed_dead(broker, "default", 2)
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))  # a pipe, not a TTY
    with pytest.raises(CommandError, match=refusal):
        run("dead", "purge", "--all")
    assert r.zcard(helpers.keys().dead) == 2


def test_purge_all_goes_ahead_when_stdin_says_yes(r, broker, monkeypatch):
    seed_dead(broker, "default", 2)
    monkeypatch.setattr("sys.stdin", io.StringIO("yes\n"))
    text, err = run("dead", "purge", "--all")
    assert text.startswith("deleted 2 dead letter(s)") and "Delete 2 dead letter(s) of queue default" in err
    assert r.zcard(helpers.keys().dead) == 0
