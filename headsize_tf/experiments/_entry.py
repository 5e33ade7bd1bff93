"""The entry point of every experiment command (`python -m headsize_tf.experiments.NAME`)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, NoReturn

from headsize_tf.core.arguments import OneLineParser
from headsize_tf.core.errors import is_interrupt, is_user_error
from headsize_tf.core.extras import as_missing_extra


def study_parser(name: str, description: str, **kwargs: Any) -> OneLineParser:
    """The argument parser of the experiment `python -m headsize_tf.experiments.NAME`.

    Its errors are one line, `NAME: error: MESSAGE (see python -m ... --help)`, with
    exit status 2, as `run_main` prints the errors found after parsing.
    """
    return OneLineParser(
        prog=name,
        description=description,
        help_command=f"python -m headsize_tf.experiments.{name} --help",
        **kwargs,
    )


def run_main(main: Callable[[], int | None], prog: str) -> NoReturn:
    """Runs an experiment's `main` and exits with its status.

    Bad input (`core.errors.is_user_error`: a missing file, a bad value, an
    output that exists) is one line `PROG: error: MESSAGE` with exit status 2,
    and a missing optional package names the extra to install, as the
    `headsize-tf` commands do. Ctrl-C is one line and exit status 130: each
    run's result file is written whole, and a rerun skips the finished runs.

    Args:
      main: The experiment's `main()`, returning its exit status.
      prog: The name in the messages (the experiment's module).
    """
    try:
        code = _status(main, prog)
    except KeyboardInterrupt:
        print(f"\n{prog}: interrupted; a rerun skips the finished runs", file=sys.stderr)
        code = 130
    raise SystemExit(code)


def _status(main: Callable[[], int | None], prog: str) -> int:
    try:
        return int(main() or 0)
    except Exception as err:
        if is_interrupt(err):
            raise KeyboardInterrupt from None
        err = as_missing_extra(err) or err
        if not is_user_error(err):
            raise
        message = " ".join(str(err).split()) or type(err).__name__
        print(f"{prog}: error: {message}", file=sys.stderr)
        return 2
