"""Fixtures of the Keras 3 front's tests (any Keras 3 backend)."""

from __future__ import annotations

import os

import keras
import pytest

from headsize_tf.core.io import cache_root

if keras.backend.backend() == "jax":
    # Eager JAX compiles every op for every new shape: most of a run's time
    # (tests/conftest.py sets XLA flags that halve a compilation). A persistent
    # compilation cache makes later runs several times faster.
    import jax

    jax.config.update(
        "jax_compilation_cache_dir",
        os.environ.get("JAX_COMPILATION_CACHE_DIR") or str(cache_root() / "jax_compilation_cache"),
    )
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)


@pytest.fixture
def global_policy():
    """Restores Keras' global dtype policy after a test that sets it."""
    policy = keras.config.dtype_policy()
    try:
        yield
    finally:
        keras.config.set_dtype_policy(policy)
