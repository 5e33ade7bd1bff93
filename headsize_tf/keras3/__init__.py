"""The Keras 3 front: headsize_tf's attention layers for `import keras` models.

`headsize_tf.keras3.layers` mirrors `headsize_tf.layers` (tf_keras / Keras 2)
layer for layer, with the same arguments, validation messages and weight
layout, written with `keras.ops` only so it runs on every Keras 3 backend
(TensorFlow and JAX are tested). Both fronts share the framework-neutral
`headsize_tf.core` (`AttentionSpec`, parameter formulas, pruning plans).
`headsize_tf.keras3.hub` brings keras-hub's BERT, DistilBERT and GPT-2 into
the Keras 3 tools (the optional `hub` extra).
"""

import importlib
from typing import Any

__all__ = ["layers"]


def __getattr__(name: str) -> Any:
    # `headsize_tf.keras3.layers` loads Keras (and its backend) on first use, not with the
    # package: `import headsize_tf.keras3.lm_training` (the reproduction runners, their
    # worker claims) starts in a fraction of a second.
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
