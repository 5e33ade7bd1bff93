"""Keras 3 models as TF Serving SavedModels (`headsize-tf export --framework keras3`).

`export_sentence_encoder`, `export_classifier` and `export_causal_lm` write
`EXPORT_DIR/VERSION/` atomically with a raw-text signature (tokenisation in
the graph, the vocabulary stored as an asset): embeddings, classifier scores,
or a causal LM's log-likelihood and greedy continuations (`generate` with a
`max_new_tokens` input). The graph is built on the TensorFlow backend; a
model of another backend (JAX) is rebuilt there from its `.keras` file in a
subprocess. Loading the export needs `tensorflow` and `tensorflow_text` only.
Exporting needs the `tf` extra: without it, importing this package fails with one line
naming the extra.
"""

from headsize_tf.core.extras import require

require("tensorflow_text", purpose="the SavedModel export, headsize_tf.keras3.serving")

from headsize_tf.keras3.serving.encoder_module import EncoderServingModule  # noqa: E402
from headsize_tf.keras3.serving.export import (  # noqa: E402
    TASKS,
    export_causal_lm,
    export_classifier,
    export_sentence_encoder,
    export_source,
)
from headsize_tf.keras3.serving.language_model import LanguageModelServingModule  # noqa: E402

__all__ = [
    "TASKS",
    "EncoderServingModule",
    "LanguageModelServingModule",
    "export_causal_lm",
    "export_classifier",
    "export_sentence_encoder",
    "export_source",
]
