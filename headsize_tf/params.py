"""Parameter counts and matching (public alias of `headsize_tf.core.params`)."""

from headsize_tf.core.params import (  # noqa: F401
    ATTENTION_TYPES,
    EncoderSpec,
    ParamCount,
    attention_params,
    blocks_params,
    causal_lm_params,
    embedding_params,
    encoder_params,
    ffn_params,
    lm_trainable_params,
    match_encoder_heads,
    match_num_heads,
    resolve_head_size,
)
from headsize_tf.core.spec import AttentionSpec  # noqa: F401
