"""Snippets run in a process that imports TensorFlow and never our code.

The serving tests check that an export loads and answers where only TensorFlow
(and TensorFlow Text) is installed. Each check used to start its own Python, and
each start imports TensorFlow again (about 5 CPU-seconds on the test machines).
One server process per pytest worker now runs them all, each snippet in a fresh
namespace: it imports TensorFlow once and never imports `headsize_tf` or Model
Garden, so the snippets' own `assert "headsize_tf" not in sys.modules` still
holds there.
"""

from __future__ import annotations

import atexit
import json
import subprocess
import sys

_SERVER = r"""
import contextlib, io, json, os, sys, traceback
# Replies go out on a copy of stdout; what anything else writes to file descriptor 1
# (native code included) goes where stderr goes.
protocol = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
import tensorflow  # noqa: F401  (imported once, before any snippet)
for line in sys.stdin:
    job = json.loads(line)
    sys.argv = ["-c", *job["argv"]]
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            exec(compile(job["code"], "<snippet>", "exec"), {"__name__": "__main__"})
        reply = {"ok": True, "stdout": printed.getvalue()}
    except SystemExit as exit:  # A command's main() ends this way.
        reply = {"ok": exit.code in (0, None), "stdout": printed.getvalue(),
                 "error": f"SystemExit({exit.code!r})"}
    except BaseException:
        reply = {"ok": False, "stdout": printed.getvalue(), "error": traceback.format_exc()}
    protocol.write(json.dumps(reply) + "\n")
    protocol.flush()
"""

_process: subprocess.Popen | None = None


def _server() -> subprocess.Popen:
    global _process
    if _process is None or _process.poll() is not None:
        _process = subprocess.Popen(
            [sys.executable, "-c", _SERVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # TensorFlow's native log lines.
            text=True,
        )
        atexit.register(_process.kill)
    return _process


def run(code: str, *argv: str) -> str:
    """Runs `code` as `python -c code *argv` would, in the clean process; returns its stdout.

    Raises AssertionError with the snippet's traceback if it raises, or if the
    process dies (then the next call starts a new one).
    """
    process = _server()
    process.stdin.write(json.dumps({"code": code, "argv": [str(a) for a in argv]}) + "\n")
    process.stdin.flush()
    line = process.stdout.readline()
    if not line:
        raise AssertionError(f"the clean TensorFlow process died (exit {process.wait()})")
    reply = json.loads(line)
    if not reply["ok"]:
        raise AssertionError(f"snippet failed in the clean TensorFlow process:\n{reply['error']}")
    return reply["stdout"]
