"""Head importance and pruning (Michel, Levy and Neubig, NeurIPS 2019).

* `head_importance`: `E |dL/dxi_h|` per head from the layers' gates.
* `iterative_pruning`: prune the least important fraction of heads per step.
* `set_head_mask` / `head_mask`: gates of a whole encoder.
* `remove_heads`: rebuild an encoder without its masked heads (real speedup).
"""

from headsize_tf.core.pruning_plan import (
    PruningStep,
    check_fraction,
    iterative_pruning,
    select_heads_to_prune,
)
from headsize_tf.pruning.importance import attention_layers_of, head_importance
from headsize_tf.pruning.remove import copy_kept_heads, head_mask, remove_heads, set_head_mask

__all__ = [
    "PruningStep",
    "attention_layers_of",
    "check_fraction",
    "copy_kept_heads",
    "head_importance",
    "head_mask",
    "iterative_pruning",
    "remove_heads",
    "select_heads_to_prune",
    "set_head_mask",
]
