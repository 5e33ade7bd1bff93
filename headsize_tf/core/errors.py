"""Error types shared by every floor."""

from __future__ import annotations


class CheckpointError(ValueError):
    """A checkpoint is unknown, missing files, or has missing/mis-shaped tensors."""


class SpecError(ValueError):
    """An invalid attention setting; the message names the value and what was expected."""
