"""Number types of the command lines' arguments (argparse `type=`) and their parser,
shared by `headsize-tf` and the experiment commands.

Each type parses its text and raises `argparse.ArgumentTypeError` naming it and
what was expected, which `OneLineParser` prints as one line with exit status 2.
"""

from __future__ import annotations

import argparse
import math
import re
from typing import Any, NoReturn


def _number(text: str, kind: type) -> float | None:
    try:
        value = kind(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def positive_int(text: str) -> int:
    """An integer > 0."""
    value = _number(text, int)
    if value is None or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    """An integer >= 0."""
    value = _number(text, int)
    if value is None or value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0."""
    value = _number(text, float)
    if value is None or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    """A finite number >= 0."""
    value = _number(text, float)
    if value is None or value < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return value


def fraction(text: str) -> float:
    """A number in [0, 1)."""
    value = _number(text, float)
    if value is None or not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1), got {text!r}")
    return value


def open_fraction(text: str) -> float:
    """A number in (0, 1)."""
    value = _number(text, float)
    if value is None or not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1), got {text!r}")
    return value


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
