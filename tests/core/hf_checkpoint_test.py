"""`core.hf_checkpoint.assign_arrays`: arrays by role onto either front's variables."""

from __future__ import annotations

import numpy as np
import pytest

from headsize_tf.core.errors import CheckpointError
from headsize_tf.core.hf_checkpoint import assign_arrays


class _Variable:
    """Stands for a tf_keras (`name`) or Keras 3 (`path`) variable."""

    def __init__(self, shape: tuple[int, ...], name: str = "dense/kernel:0"):
        self.shape = shape
        self.name = name
        self.value: np.ndarray | None = None

    def assign(self, value: np.ndarray) -> None:
        self.value = value


def test_assigns_float32_and_skips_a_missing_pooler():
    kernel, pooler = _Variable((2, 3)), _Variable((3, 3))
    assign_arrays(
        {"intermediate/kernel": kernel, "pooler/kernel": pooler},
        {"intermediate/kernel": np.ones((2, 3), np.float64)},
        "model.safetensors",
        "encoder",
    )
    assert kernel.value.dtype == np.float32 and kernel.value.shape == (2, 3)
    assert pooler.value is None


def test_a_missing_array_is_named():
    with pytest.raises(CheckpointError, match="no array for the backbone weight 'output/bias'"):
        assign_arrays({"output/bias": _Variable((3,))}, {}, "model.safetensors", "backbone")


def test_a_misshaped_array_names_the_variable_by_path_or_name():
    variable = _Variable((2, 3))
    with pytest.raises(CheckpointError, match=r"weight dense/kernel:0 of shape \(2, 3\)"):
        assign_arrays({"k": variable}, {"k": np.ones((3, 2))}, "f", "encoder")
    variable.path = "backbone/dense/kernel"
    with pytest.raises(CheckpointError, match="weight backbone/dense/kernel of shape"):
        assign_arrays({"k": variable}, {"k": np.ones((3, 2))}, "f", "backbone")
