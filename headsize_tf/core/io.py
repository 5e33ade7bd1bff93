"""Atomic file writes shared by experiments, tools and benchmarks."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import re
import tempfile
from collections.abc import Iterator
from typing import Any


def cache_root() -> pathlib.Path:
    """`$XDG_CACHE_HOME/headsize_tf` (default `~/.cache/headsize_tf`)."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(cache) / "headsize_tf"


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[pathlib.Path]:
    """Yields a temporary path beside `path`, renamed onto `path` on success.

    The one write-then-rename helper: readers never see a partial file, and a
    failure (or an interrupt) leaves any previous `path` untouched.

    Example:

    >>> with atomic_path("out/vectors.npy") as tmp:
    ...     numpy.save(tmp, vectors)
    """
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike, overwrite: bool = True) -> Iterator[pathlib.Path]:
    """Yields an empty temporary directory beside `path` that replaces `path` on success.

    The directory counterpart of `atomic_path`: readers see the old directory
    or the whole new one; a failure leaves any previous `path` untouched and
    removes the temporary one. The new directory gets the usual permissions
    (0777 less the umask), not the private mode of a temporary directory.

    Args:
      path: The directory to write.
      overwrite: Replace an existing `path` (else, if one appeared meanwhile,
        raise `FileExistsError` and keep it).
    """
    import shutil
    import tempfile

    final = pathlib.Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        yield tmp
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o777 & ~umask)
        if final.exists():
            if not overwrite:
                raise FileExistsError(f"Output directory {final} exists; pass overwrite=True.")
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def check_output_free(output: str | os.PathLike, overwrite: bool, kind: str = "directory") -> None:
    """Raises an `OSError` before any work when `output` cannot be written.

    The one "exists" check of the library's writers: `output` exists and may
    not be replaced (`FileExistsError`; its message names the Python argument,
    the CLI shows its own flag instead), or `check_output_path` refuses it.

    Args:
      output: The directory or file to write.
      overwrite: Whether an existing `output` may be replaced.
      kind: "directory" or "file": what `output` will be.
    """
    check_output_path(output, kind)
    if pathlib.Path(output).exists() and not overwrite:
        raise FileExistsError(f"Output {kind} {output} exists; pass overwrite=True to replace it.")


def check_output_path(output: str | os.PathLike, kind: str = "directory") -> None:
    """Raises an `OSError` naming `output` when it cannot be written as a `kind`.

    `kind` is "directory" or "file". Refused: a symbolic link, an existing
    `output` of the other kind, and a path whose nearest existing ancestor is a file or a folder
    where nothing can be created (tried with an empty folder, removed at once).
    """
    path = pathlib.Path(output).absolute()
    if path.is_symlink():  # Replacing it would replace the link, not what it points to.
        raise FileExistsError(
            f"Output {output} is a symbolic link; expected a {kind} or a new path."
        )
    if path.exists() and path.is_dir() != (kind == "directory"):
        other = "directory" if path.is_dir() else "file"
        raise FileExistsError(f"Output {output} is a {other}; expected a {kind} or a new path.")
    ancestor = path.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise NotADirectoryError(
            f"Output {output} cannot be created: {ancestor} is a file, not a directory."
        )
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".headsize_tf-probe-", dir=ancestor))
    except OSError as err:
        raise PermissionError(
            f"Output {output} cannot be created: nothing can be written in {ancestor} "
            f"({err.strerror})."
        ) from None


def write_atomic(path: str | os.PathLike, text: str) -> pathlib.Path:
    """Writes `text` to `path` through a temporary file renamed into place."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return pathlib.Path(path)


def write_json(path: str | os.PathLike, data: Any) -> pathlib.Path:
    return write_atomic(path, json.dumps(data, indent=2) + "\n")


def save_figure(fig, path: str | os.PathLike, dpi: int = 120) -> pathlib.Path:
    """Saves a matplotlib figure atomically and closes it."""
    import matplotlib.pyplot as plt

    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return pathlib.Path(path)


@contextlib.contextmanager
def native_logs_to(path: str | os.PathLike | None) -> Iterator[None]:
    """Sends what native code writes to the process' stderr (file descriptor 2) to `path`.

    TensorFlow's C++ runtime logs some lines (e.g. grappler's "Number of
    eligible GPUs") through absl before its log level applies; they go to a
    file instead of the screen. Python's `sys.stderr` is flushed first and
    descriptor 2 is restored on exit, also on an error, so an error message
    printed after the block reaches the screen. `None` changes nothing.
    """
    if path is None:
        yield
        return
    import sys

    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(path, "ab") as sink:
            os.dup2(sink.fileno(), 2)
            try:
                yield
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
    finally:
        os.close(saved)


# Native info and warning lines: absl's ("I0000 00:00:1795961713.288864    2509
# device_compiler.h:196] ...", with its "WARNING: All log messages before
# absl::InitializeLog() ..." header) and TensorFlow's own ("2026-11-29
# 14:15:00.123456: W tensorflow/...] ...").
_NATIVE_LINE = re.compile(
    rb"(?:[IW]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [^ \]]+:\d+\] "
    rb"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IW] "
    rb"|WARNING: All log messages before absl::InitializeLog\(\) is called)"
)
# The first bytes of a line that may still become one of those lines.
_NATIVE_START = re.compile(
    rb"[IW]\d{0,4}(?: [\d:. ]*[^\s\]]*\]?)?"
    rb"|\d{1,4}(?:-[\d:. -]*[IW]?)?"
    rb"|W(?:A(?:R(?:N(?:I(?:N(?:G(?::.*)?)?)?)?)?)?)?"
)


class _NativeLineFilter:
    """Forwards what is written to a pipe to `out`, less the native log lines.

    Bytes are forwarded as they arrive: a partial line is held back only
    while it may still become a log line, so progress written without a
    newline shows at once.
    """

    def __init__(self, source: int, out: int):
        self.source, self.out = source, out
        self.held = b""
        self.mid_line = False  # Inside a line already forwarded.

    def run(self) -> None:
        while chunk := os.read(self.source, 65536):
            self._feed(chunk)
        if self.held:
            self._write(self.held)

    def _feed(self, chunk: bytes) -> None:
        data, self.held = self.held + chunk, b""
        forward = bytearray()
        while data:
            end = data.find(b"\n")
            line, data = (data, b"") if end < 0 else (data[: end + 1], data[end + 1 :])
            if self.mid_line:
                forward += line
            elif end < 0 and (_NATIVE_LINE.match(line) or _NATIVE_START.fullmatch(line)):
                self.held = line
                break
            elif not _NATIVE_LINE.match(line):
                forward += line
            self.mid_line = end < 0 and not self.held
        self._write(bytes(forward))

    def _write(self, data: bytes) -> None:
        while data:
            data = data[os.write(self.out, data) :]


def _flush_stderr() -> None:
    import sys

    for stream in {id(s): s for s in (sys.stderr, sys.__stderr__) if s is not None}.values():
        stream.flush()


# How long a finished block waits for the filter to pass on its last lines: a child
# process that inherited the pipe may hold it open longer, and the filter then goes on
# alone until that child closes it.
_FILTER_DRAIN_SECONDS = 2.0


def _filter_program() -> str:
    """The filter process's program: `_NativeLineFilter` from stdin to stdout, on the
    standard library alone (it must run whatever the environment can import)."""
    import inspect

    return "\n".join(
        [
            "import os, re, signal",
            "signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: drain, then end.",
            f"_NATIVE_LINE = re.compile({_NATIVE_LINE.pattern!r})",
            f"_NATIVE_START = re.compile({_NATIVE_START.pattern!r})",
            inspect.getsource(_NativeLineFilter),
            "_NativeLineFilter(0, 1).run()",
        ]
    )


@contextlib.contextmanager
def without_native_logs() -> Iterator[None]:
    """Drops native libraries' info and warning lines from a terminal's stderr.

    TensorFlow 2.20 logs some lines through absl before absl is initialised
    (XLA's "Compiled cluster using XLA!", preceded by absl's "All log messages
    before absl::InitializeLog()" warning), whatever `TF_CPP_MIN_LOG_LEVEL`
    says. Where stderr is a terminal, file descriptor 2 is, inside the block, a
    pipe read by a small filter process that passes every line to the terminal,
    in order, but lines in those formats at info or warning level: errors
    pass, and so does a line written just before a crash (the filter reads the
    pipe to its end, whatever happens to this process), and native code never
    waits on this process's threads. Elsewhere (a file, a pipe, a test's
    capture) nothing changes. On exit descriptor 2 is restored and the last
    lines delivered.
    """
    import subprocess
    import sys

    if not os.isatty(2):
        yield
        return
    _flush_stderr()
    saved = os.dup(2)
    read_end, write_end = os.pipe()
    try:
        child = subprocess.Popen(
            [sys.executable, "-I", "-c", _filter_program()],
            stdin=read_end,
            stdout=saved,
            stderr=saved,
        )
    except OSError:  # No filter: stderr as it is.
        for fd in (read_end, write_end, saved):
            os.close(fd)
        yield
        return
    os.close(read_end)
    os.dup2(write_end, 2)
    os.close(write_end)
    try:
        yield
    finally:
        _flush_stderr()
        os.dup2(saved, 2)  # Closes this process's write end of the pipe.
        os.close(saved)
        try:
            child.wait(timeout=_FILTER_DRAIN_SECONDS)
        except subprocess.TimeoutExpired:
            pass
