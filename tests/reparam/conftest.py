"""Shared fixtures of the re-parametrisation tests: a tiny trained causal LM model_dir."""

import pytest

from headsize_tf.training import train
from tests.reparam.util import CONFIGS, FOUR_STEPS


@pytest.fixture(scope="session")
def lm_dir(austen_data_dir, tmp_path_factory) -> str:
    """A tiny causal LM (2 layers of 4 heads of 16, width 64), 4 steps on Austen (read only)."""
    model_dir = str(tmp_path_factory.mktemp("lm") / "model")
    train.run(
        "headsize_lm/language_modeling",
        model_dir,
        [str(CONFIGS / "headsize_lm_austen_tiny.yaml")],
        FOUR_STEPS,
        data_dir=str(austen_data_dir),
    )
    return model_dir
