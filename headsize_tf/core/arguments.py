"""Number types of the command lines' arguments (argparse `type=`) and their parser,
shared by `headsize-tf` and the experiment commands.

Each type parses its text and raises `argparse.ArgumentTypeError` naming it and
what was expected, which `OneLineParser` prints as one line with exit status 2.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from typing import Any, NoReturn


def _number(text: str, kind: type) -> float | None:
    try:
        value = kind(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _number_type(
    kind: type, accepts: Callable[[Any], bool], expected: str, doc: str
) -> Callable[[str], Any]:
    """An argparse `type=`: `text` as `kind`, refused unless `accepts` it."""

    def parse(text: str) -> Any:
        value = _number(text, kind)
        if value is None or not accepts(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    parse.__doc__ = doc
    return parse


positive_int = _number_type(int, lambda v: v > 0, "a positive integer", "An integer > 0.")
non_negative_int = _number_type(int, lambda v: v >= 0, "an integer >= 0", "An integer >= 0.")
positive_float = _number_type(float, lambda v: v > 0, "a finite number > 0", "A finite number > 0.")
non_negative_float = _number_type(
    float, lambda v: v >= 0, "a finite number >= 0", "A finite number >= 0."
)
fraction = _number_type(
    float, lambda v: 0.0 <= v < 1.0, "a fraction in [0, 1)", "A number in [0, 1)."
)
open_fraction = _number_type(
    float, lambda v: 0.0 < v < 1.0, "a fraction in (0, 1)", "A number in (0, 1)."
)


class OneLineParser(argparse.ArgumentParser):
    """An `argparse.ArgumentParser` whose errors are one line and exit status 2.

    argparse prints its usage, then the error; here the error alone,
    `PROG: error: MESSAGE (see HELP)`, where HELP is how to get the usage
    (`--help` shows it as before). Subparsers are of the same class.

    Args:
      help_command: The command that shows the usage (default `PROG --help`).
      **kwargs: `argparse.ArgumentParser`'s.

    Example:

    >>> parser = OneLineParser(prog="study")
    >>> _ = parser.add_argument("--steps", type=positive_int)
    >>> parser.parse_args(["--steps", "0"])  # stderr: one line, then exit status 2
    Traceback (most recent call last):
    SystemExit: 2
    """

    def __init__(self, *args: Any, help_command: str | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.help_command = help_command

    def error(self, message: str) -> NoReturn:
        # A required option with hidden old spellings is a one-of group (`cli._args.add_option`).
        one = re.fullmatch(r"one of the arguments (\S+) is required", message)
        if one:
            message = f"the following arguments are required: {one.group(1)}"
        hint = self.help_command or f"{self.prog} --help"
        self.exit(2, f"{self.prog}: error: {message} (see {hint})\n")
