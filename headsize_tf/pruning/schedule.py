"""The iterative pruning schedule run on a live model through its head mask."""

from __future__ import annotations

from headsize_tf.core.io import check_output_free

__all__ = ["check_min_heads", "check_output", "split_config"]
check_output = check_output_free  # the library's one "exists" check (`headsize_tf.core.io`)


def check_min_heads(min_heads_per_layer: int, model: str) -> None:
    """Physical removal keeps at least one head per attention layer of an LM or seq2seq."""
    if min_heads_per_layer < 1:
        raise ValueError(
            f"min_heads_per_layer must be at least 1 for {model}; got {min_heads_per_layer}."
        )


def split_config(params, split: str, seed: int | None = None):
    """The task's data config for `split` ("train" or "validation"). Training data gets a
    fixed shuffle seed (`seed`; default 0 unless the run set one), so importance is computed
    on the same batches at every call and in every rerun (Model Garden otherwise draws a
    new seed); another `seed` draws other training batches."""
    if split != "train":
        return params.task.validation_data
    config = params.task.train_data
    if seed is not None:
        return config.replace(seed=int(seed))
    return config.replace(seed=0) if getattr(config, "seed", None) is None else config
