"""Head importance and physical head removal for Keras 3 models (Michel et al., 2019).

The schedules (`iterative_pruning`) and the slicing plans are the shared
`headsize_tf.core.pruning_plan`; this package supplies the Keras 3 gradients
and weight surgery; `LMAdapter` runs the one pruning driver
(`headsize_tf.core.prune_loop`) on a Keras 3 causal LM.
"""

from headsize_tf.core.pruning_plan import iterative_pruning
from headsize_tf.keras3.pruning.importance import attention_layers_of, head_importance
from headsize_tf.keras3.pruning.lm_adapter import LMAdapter
from headsize_tf.keras3.pruning.remove import head_mask, remove_heads, set_head_mask

__all__ = [
    "LMAdapter",
    "attention_layers_of",
    "head_importance",
    "head_mask",
    "iterative_pruning",
    "remove_heads",
    "set_head_mask",
]
