"""`core.io`: files and directories appear whole or not at all; native log lines are dropped."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from headsize_tf.core import io as core_io
from headsize_tf.core.io import atomic_directory, atomic_path, write_json


def test_atomic_path_keeps_the_old_file_on_failure(tmp_path):
    target = tmp_path / "a" / "x.json"
    write_json(target, {"v": 1})
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("cut off")
    assert target.read_text() == '{\n  "v": 1\n}\n'
    assert sorted(p.name for p in target.parent.iterdir()) == ["x.json"]


def test_atomic_directory_replaces_whole_and_with_the_usual_mode(tmp_path):
    target = tmp_path / "model"
    target.mkdir()
    (target / "old.txt").write_text("old")
    umask = os.umask(0o022)
    try:
        with atomic_directory(target) as tmp:
            (tmp / "new.txt").write_text("new")
            assert not (target / "new.txt").exists()  # Not visible before the end.
    finally:
        os.umask(umask)
    assert sorted(p.name for p in target.iterdir()) == ["new.txt"]
    assert stat.S_IMODE(target.stat().st_mode) == 0o755  # Not mkdtemp's 0700.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_atomic_directory_failure_and_no_overwrite_keep_the_old_one(tmp_path):
    target = tmp_path / "model"
    target.mkdir()
    (target / "old.txt").write_text("old")
    with pytest.raises(RuntimeError), atomic_directory(target) as tmp:
        (tmp / "new.txt").write_text("new")
        raise RuntimeError("cut off")
    with pytest.raises(FileExistsError, match="exists; pass overwrite=True"):
        with atomic_directory(target, overwrite=False) as tmp:
            (tmp / "new.txt").write_text("new")
    assert sorted(p.name for p in target.iterdir()) == ["old.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # No temporaries left.


ABSL_INFO = (
    b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
    b"I0000 00:00:1795961713.288864    2509 device_compiler.h:196] Compiled cluster using XLA!"
    b"  This line is logged at most once for the lifetime of the process.\n"
)
TF_WARNING = b"2026-11-29 14:15:00.123456: W tensorflow/core/framework/op_kernel.cc:1857] slow\n"
ABSL_ERROR = b"E0000 00:00:1795961713.288864    2509 cuda_dnn.cc:8579] Unable to register cuDNN\n"


def _filtered(chunks: list[bytes]) -> bytes:
    """What `_NativeLineFilter` forwards when `chunks` are written to its pipe one by one."""
    source, sink = os.pipe()
    out_read, out_write = os.pipe()
    line_filter = core_io._NativeLineFilter(source, out_write)
    for chunk in chunks:
        line_filter._feed(chunk)
    os.close(sink)
    line_filter.run()  # Reads the (empty) pipe to its end: what is held is forwarded.
    os.close(out_write)
    forwarded = b""
    while data := os.read(out_read, 65536):
        forwarded += data
    for fd in (source, out_read):
        os.close(fd)
    return forwarded


def test_native_info_and_warning_lines_are_dropped_and_the_rest_kept():
    text = b"step 1\n" + ABSL_INFO + b"loss 0.5\n" + TF_WARNING + ABSL_ERROR + b"done\n"
    expected = b"step 1\nloss 0.5\n" + ABSL_ERROR + b"done\n"
    assert _filtered([text]) == expected
    # Whatever the pipe's chunks: byte by byte, or cut inside a log line.
    assert _filtered([bytes([b]) for b in text]) == expected
    assert _filtered([text[:30], text[30:120], text[120:]]) == expected


def test_a_partial_line_is_forwarded_at_once_unless_it_may_be_a_log_line():
    source, sink = os.pipe()
    out_read, out_write = os.pipe()
    line_filter = core_io._NativeLineFilter(source, out_write)
    line_filter._feed(b"\rconverting layer 3/30")  # Progress without a newline: shown at once.
    assert os.read(out_read, 100) == b"\rconverting layer 3/30"
    line_filter._feed(b" done\nI0000 00:00:17")  # The rest of that line; a log line starts.
    assert os.read(out_read, 100) == b" done\n"
    assert line_filter.held == b"I0000 00:00:17"
    for fd in (source, sink, out_read, out_write):
        os.close(fd)


def run_on_a_terminal(code: str, env: dict | None = None) -> tuple[int, str, str]:
    """Runs Python `code` with stderr on a pseudo-terminal: (exit status, stdout, what the
    terminal showed, newlines as "\\n")."""
    import pty

    master, terminal = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=terminal, env=env
    )
    os.close(terminal)
    shown = b""
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: every process holding the terminal has ended.
            break
        if not data:
            break
        shown += data
    out, _ = process.communicate()
    os.close(master)
    return process.returncode, out.decode(), shown.decode().replace("\r\n", "\n")


def test_on_a_terminal_native_lines_are_dropped_in_order_and_a_crash_keeps_its_last_words():
    code = (
        "import os, sys\n"
        "from headsize_tf.core.io import without_native_logs\n"
        "with without_native_logs():\n"
        f"    os.write(2, {ABSL_INFO + b'kept' + bytes([10])!r})\n"
        '    print("python\'s stderr", file=sys.stderr, flush=True)\n'
        f"    os.write(2, {TF_WARNING + ABSL_ERROR!r})\n"
        "os.write(2, b'after' + bytes([10]))\n"
    )
    status, _, shown = run_on_a_terminal(code)
    assert status == 0
    assert shown == "kept\npython's stderr\n" + ABSL_ERROR.decode() + "after\n"
    # A fatal native line just before an abort reaches the terminal: the filter process reads
    # the pipe to its end.
    fatal = b"F0000 00:00:1795961713.288864    2509 op_kernel.cc:1] Check failed: x == y" + bytes(
        [10]
    )
    code = (
        "import os\n"
        "from headsize_tf.core.io import without_native_logs\n"
        "with without_native_logs():\n"
        f"    os.write(2, {ABSL_INFO + fatal!r})\n"
        "    os.abort()\n"
    )
    status, _, shown = run_on_a_terminal(code)
    assert status != 0 and shown == fatal.decode()


def test_off_a_terminal_nothing_changes(capfd):
    with core_io.without_native_logs():  # capfd: descriptor 2 is a file.
        os.write(2, ABSL_INFO)
    assert capfd.readouterr().err == ABSL_INFO.decode()
