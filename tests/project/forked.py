"""Many ``python -m django ...`` command lines for the price of one interpreter start.

A test that checks what a shell sees (exit code, stdout, stderr) of a dozen
command lines paid a dozen interpreter starts and ``django.setup()``s, about
0.9 CPU-s each. Here one interpreter sets Django up and forks a child per
command line, which runs it as ``python -m django`` would, with its own
stdout and stderr files and its own exit status. The children start together:
the Redis-down cases spend their time waiting on a port nothing listens on.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

DRIVER = """
import json, os, sys
import django
django.setup()
import django.__main__
from django.core.management import execute_from_command_line
out, commands = sys.argv[1], json.loads(sys.argv[2])
sys.stdout.flush(); sys.stderr.flush()
children = {}
for n, args in enumerate(commands):
    pid = os.fork()
    if pid:
        children[pid] = n
        continue
    for fd, name in ((1, "out"), (2, "err")):
        os.dup2(os.open(os.path.join(out, f"{n}.{name}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
    code = 0
    try:
        sys.argv = [django.__main__.__file__, *args]  # as `python -m django` names itself
        execute_from_command_line(sys.argv)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 1
    sys.stdout.flush(); sys.stderr.flush()
    os._exit(code)
while children:
    pid, status = os.wait()
    with open(os.path.join(out, f"{children.pop(pid)}.rc"), "w") as f:
        f.write(str(os.waitstatus_to_exitcode(status)))
"""


def run_forked(commands: Sequence[Sequence[str]], env: dict[str, str], cwd: Path) -> list[subprocess.CompletedProcess[str]]:
    """Run each of ``commands`` (the arguments after ``python -m django``) in a child of one set-up interpreter."""
    with tempfile.TemporaryDirectory(prefix="redisq-forked-") as out:
        driver = subprocess.run(
            [sys.executable, "-c", DRIVER, out, json.dumps([list(c) for c in commands])],
            cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False,
        )
        assert driver.returncode == 0, driver.stderr
        return [
            subprocess.CompletedProcess(list(args), int(Path(out, f"{n}.rc").read_text()),
                                        Path(out, f"{n}.out").read_text(), Path(out, f"{n}.err").read_text())
            for n, args in enumerate(commands)
        ]
