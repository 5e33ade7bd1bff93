"""SavedModel export in the TF Serving layout, tokenisation inside the graph.

`EXPORT_DIR/VERSION/` holds a SavedModel with two signatures:

* `serving_default(text: string[batch])`: raw text in; WordPiece tokenisation
  with tensorflow-text inside the graph, so clients send strings;
* `serve_ids(input_word_ids, input_mask: int32[batch, length])`: token ids in.

Outputs by task: `embedding` -> `embeddings` [batch, width] (pooled, as the
encoder's sentence-transformers config says); `sentence_prediction` ->
`logits` and `probabilities` [batch, classes]; `lm` (a causal LM, text
tokenised without [CLS]/[SEP] as in training) -> `log_likelihood` [batch]
(sum over tokens 2..n of log p(token | prefix)), `num_tokens` [batch] and
`next_token_probabilities` [batch, vocab] after the last token. Loading needs only
`tensorflow` and `tensorflow_text` (for the tokeniser ops). The version
directory is written to a temporary sibling and renamed on success, so a
failed export leaves nothing behind (`export`, shared with the Keras 3 front's
`headsize_tf.keras3.serving`, lives in `headsize_tf.data.serving_export`).
"""

from __future__ import annotations

import os

import tensorflow as tf

from headsize_tf.data.serving_export import IDS_SPEC as _IDS
from headsize_tf.data.serving_export import MASK_SPEC as _MASK
from headsize_tf.data.serving_export import TEXT_SPEC as _TEXT
from headsize_tf.data.serving_export import export, language_model_outputs  # noqa: F401

# `export` and `language_model_outputs` are shared with the Keras 3 front; imported
# from here before they moved.
from headsize_tf.data.wordpiece import FOLD
from headsize_tf.pretrained import SentenceEncoder

TASKS = ("embedding", "sentence_prediction", "lm")


def model_variables(*models) -> list[tf.Variable]:
    """Every variable `models` compute with, each once: Keras weights and head gates.

    A serving module tracks these instead of the models themselves (as Keras 3's
    own `model.export` does), so a SavedModel holds the state its signatures read
    without tf_keras's per-layer serialisation. The attention layers' head gates
    are not Keras weights (`head_attention.py`): they are found on the layers.
    """
    found: dict[int, tf.Variable] = {}
    for model in models:
        if model is None:
            continue
        for variable in model.variables:
            found.setdefault(id(variable), variable)
        for layer in model.submodules:
            gates = getattr(layer, "head_gates", None)
            if isinstance(gates, tf.Variable):
                found.setdefault(id(gates), gates)
    return list(found.values())


class ServingModule(tf.Module):
    """The exported graph: a tokenising `SentenceEncoder` and, for classification, a classifier.

    Args:
      sentence_encoder: Tokeniser and (for "embedding") the encoder and pooling.
      task: "embedding" or "sentence_prediction".
      classifier: For "sentence_prediction": a callable mapping the encoder
        inputs dict to logits (a `SentenceClassifier` or Model Garden's
        `BertClassifier`); for "lm": the causal LM (ids -> logits).
    """

    def __init__(self, sentence_encoder: SentenceEncoder, task: str, classifier=None):
        super().__init__(name="headsize_serving")
        if task not in TASKS:
            raise ValueError(f"Unknown export task {task!r}; expected one of {list(TASKS)}.")
        if task != "embedding" and classifier is None:
            raise ValueError(f"task {task!r} needs a model (`classifier`).")
        # Not tracked: the SentenceEncoder's own tf.functions must not be exported
        # (an LM cannot run its embedding function), nor the models: tf_keras's
        # SavedModel serialisation of every layer traces each layer's call again
        # (the demo's export of a pruned MiniLM classifier: 26 s -> 8 s). Tracked:
        # the WordPiece table (vocabulary asset) and the models' variables.
        object.__setattr__(self, "sentence_encoder", sentence_encoder)
        self.wordpiece = sentence_encoder.tokenizer
        object.__setattr__(self, "encoder", sentence_encoder.encoder)
        object.__setattr__(self, "classifier", classifier)
        self.task = task

    def _trackable_children(self, save_type="checkpoint", **kwargs):
        # The models' variables as they are when saved (a model may be built later).
        self.model_variables = model_variables(self.encoder, self.classifier)
        return super()._trackable_children(save_type, **kwargs)

    def _outputs(self, inputs: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        if self.task == "embedding":
            return {"embeddings": self.sentence_encoder.embed_inputs(inputs)}
        if self.task == "lm":
            return language_model_outputs(self.classifier, inputs)
        logits = tf.cast(self.classifier(inputs, training=False), tf.float32)
        return {"logits": logits, "probabilities": tf.nn.softmax(logits, axis=-1)}

    @tf.function(input_signature=[_TEXT], autograph=False)
    def serve_text(self, text):
        inputs = self.sentence_encoder.tokenize(text, add_special_tokens=self.task != "lm")
        if self.task == "lm":  # `language_model_outputs` takes a batch of no position.
            return self._outputs(inputs)
        # No text at all tokenizes to no position: the outputs of one are cut to 0 rows.
        one = {name: tf.zeros([1, 2], value.dtype) for name, value in inputs.items()}
        return tf.cond(
            tf.size(text) > 0,
            lambda: self._outputs(inputs),
            lambda: {k: v[:0] for k, v in self._outputs(one).items()},
        )

    @tf.function(input_signature=[_IDS, _MASK], autograph=False)
    def serve_ids(self, input_word_ids, input_mask):
        inputs = {
            "input_word_ids": input_word_ids,
            "input_mask": input_mask,
            "input_type_ids": tf.zeros_like(input_word_ids),
        }
        return self._outputs(inputs)


ENCODER_EXPERIMENTS = (
    "headsize_bert/pretraining",
    "headsize_bert/sentence_prediction",
    "headsize_bert/sentence_prediction_text",
    "headsize_bert/span_labeling",
)


def experiment_sentence_encoder(
    model_dir: str,
    vocab_file: str | None = None,
    *,
    pooling: str = "mean",
    normalize: bool = True,
) -> SentenceEncoder:
    """The encoder of an encoder experiment's model_dir as a `SentenceEncoder`.

    Args:
      model_dir: A `headsize-tf train` model_dir of masked-LM pretraining,
        sentence classification or span labeling (any of
        `ENCODER_EXPERIMENTS`): its trained `HeadsizeBertEncoder` embeds.
      vocab_file: Its vocabulary (default: `vocab.txt` next to the training
        data, the layout `headsize-tf data prepare` writes).
      pooling, normalize: As `SentenceEncoder` (default: mean pooling, L2
        normalised, as sentence-transformers).

    Raises:
      ValueError: a model_dir of another experiment (a causal LM, a
        translation model), or a missing vocabulary.
    """
    from headsize_tf.training import train

    experiment = train.experiment_of(model_dir)
    if experiment not in ENCODER_EXPERIMENTS:
        raise ValueError(
            f"{model_dir} is a {experiment} model_dir; sentence embeddings come from an encoder "
            f"experiment ({', '.join(ENCODER_EXPERIMENTS)})."
        )
    params, model = train.load_trained_model(model_dir)
    return _sentence_encoder(params, model, model_dir, vocab_file, pooling, normalize)


def _sentence_encoder(
    params, model, model_dir: str, vocab_file: str | None, pooling: str, normalize: bool
) -> SentenceEncoder:
    from headsize_tf.modeling.bert_encoder import HeadsizeBertEncoder
    from headsize_tf.training import train

    encoder = getattr(model, "checkpoint_items", {}).get("encoder")
    if not isinstance(encoder, HeadsizeBertEncoder):
        raise ValueError(
            f"{model_dir} is a {train.experiment_of(model_dir)} model_dir; sentence embeddings "
            f"come from an encoder experiment ({', '.join(ENCODER_EXPERIMENTS)})."
        )
    length = getattr(params.task.train_data, "seq_length", 0) or encoder.get_config().get(
        "max_sequence_length", 512
    )
    # Uncased unless the data says otherwise (the tokenisation the run was trained with).
    lower_case = getattr(params.task.train_data, "lower_case", True)
    return SentenceEncoder(
        encoder,
        _vocab_of(params, vocab_file),
        lower_case=lower_case,
        max_seq_length=length,
        pooling=pooling,
        normalize=normalize,
        source=model_dir,
    )


def experiment_classifier(model_dir: str, vocab_file: str | None = None):
    """(SentenceEncoder for tokenising, BertClassifier) of a sentence_prediction model_dir.

    The vocabulary defaults to `vocab.txt` next to the training data (the
    layout `headsize-tf data prepare` writes).
    """
    from headsize_tf.training import train

    params, model = train.load_trained_model(model_dir)
    if not hasattr(params.task, "metric_type"):
        raise ValueError(f"{model_dir} is not a sentence_prediction model_dir.")
    return _sentence_encoder(params, model, model_dir, vocab_file, "cls", False), model


def _vocab_of(params, vocab_file: str | None) -> str:
    if vocab_file is None:
        vocab_file = getattr(params.task.train_data, "vocab_file", "") or os.path.join(
            os.path.dirname(params.task.train_data.input_path), "vocab.txt"
        )
    if not os.path.exists(vocab_file):
        raise ValueError(f"Vocabulary {vocab_file!r} does not exist; pass --vocab-file.")
    return vocab_file


def experiment_language_model(model_dir: str, vocab_file: str | None = None):
    """(tokenizer, HeadsizeCausalLM) of a headsize_lm/language_modeling model_dir."""
    from headsize_tf.configs import language_modeling
    from headsize_tf.training import train

    params, model = train.load_trained_model(model_dir)
    if not isinstance(params.task.model, language_modeling.CausalLMConfig):
        raise ValueError(f"{model_dir} is not a language_modeling model_dir.")
    # As training read text (prepared corpora, or tensorflow-text from TFDS): case folding.
    lower_case = params.task.train_data.lower_case
    tokenizer = SentenceEncoder(
        model,
        _vocab_of(params, vocab_file),
        lower_case=FOLD if lower_case else False,
        max_seq_length=params.task.model.max_sequence_length,
        pooling="mean",
        normalize=False,
        source=model_dir,
    )
    return tokenizer, model
