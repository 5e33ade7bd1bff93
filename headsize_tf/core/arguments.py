"""Number types of the command lines' arguments (argparse `type=`), shared by
`headsize-tf` and the experiment commands.

Each parses its text and raises `argparse.ArgumentTypeError` naming it and what
was expected, which argparse prints as one line with exit status 2.
"""

from __future__ import annotations

import argparse
import math


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
