"""Causal language modeling task for Model Garden (`headsize_lm/language_modeling`).

Data: TFRecords with an int64 `input_ids` feature of `seq_length + 1` tokens
per example (`headsize-tf data prepare austen` writes `lm_{split}.tfrecord`);
inputs are the first `seq_length` tokens, targets the last `seq_length`.
Metrics: token accuracy and perplexity (exp of the mean token loss).
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf
import tf_keras
from official.core import base_task, input_reader, task_factory
from official.core import config_definitions as cfg
from official.modeling import hyperparams

from headsize_tf import params
from headsize_tf.configs.encoders import (
    layer_head_size,
    spec_from_config,
    validate_attention_fields,
)
from headsize_tf.modeling.causal_lm import HeadsizeCausalLM


@dataclasses.dataclass
class CausalLMConfig(hyperparams.Config):
    """Shape of a `HeadsizeCausalLM` (see its docstring)."""

    vocab_size: int = 32000
    hidden_size: int = 256
    num_layers: int = 6
    num_attention_heads: int = 8
    attention_type: str = "standard"
    head_size: int | str | None = None
    shared_key_dim: int | None = None
    mixing_initializer: str = "uniform"
    intermediate_size: int | None = None
    max_sequence_length: int = 256
    dropout_rate: float = 0.1
    attention_dropout_rate: float = 0.0
    initializer_range: float = 0.02


@dataclasses.dataclass
class LMDataConfig(cfg.DataConfig):
    """LM data: prepared TFRecords (`input_path`) or raw TFDS text (`tfds_name`).

    With `tfds_name` (e.g. "lm1b", on networked machines) the `text` feature
    is tokenized with tensorflow-text's `BertTokenizer` from `vocab_file` and
    the token stream is cut into windows of `seq_length + 1`.
    """

    input_path: str = ""
    seq_length: int = 128
    global_batch_size: int = 64
    is_training: bool = True
    vocab_file: str = ""
    lower_case: bool = True
    text_feature: str = "text"


@dataclasses.dataclass
class LanguageModelingConfig(cfg.TaskConfig):
    model: CausalLMConfig = dataclasses.field(default_factory=CausalLMConfig)
    train_data: LMDataConfig = dataclasses.field(default_factory=LMDataConfig)
    validation_data: LMDataConfig = dataclasses.field(
        default_factory=lambda: LMDataConfig(is_training=False)
    )


def build_lm(config: CausalLMConfig) -> HeadsizeCausalLM:
    validate_attention_fields(config)
    return HeadsizeCausalLM(**dict(config.as_dict(), head_size=layer_head_size(config)))


def to_spec(config: CausalLMConfig) -> params.EncoderSpec:
    """The shape of an LM config, for `params.causal_lm_params`."""
    return spec_from_config(config, config.max_sequence_length)


class Perplexity(tf_keras.metrics.Mean):
    """exp(mean token cross-entropy)."""

    def result(self):
        return tf.exp(super().result())


@task_factory.register_task_cls(LanguageModelingConfig)
class LanguageModelingTask(base_task.Task):
    """Next-token prediction with a `HeadsizeCausalLM`."""

    def build_model(self) -> tf_keras.Model:
        model = build_lm(self.task_config.model)
        model(tf.zeros([1, 1], tf.int32))  # Create the weights.
        return model

    def build_inputs(self, params: LMDataConfig, input_context=None):
        if params.tfds_name:
            return self._build_tfds_inputs(params, input_context)
        length = params.seq_length + 1

        def decode(record):
            features = {"input_ids": tf.io.FixedLenFeature([length], tf.int64)}
            return tf.io.parse_single_example(record, features)

        def parse(example):
            ids = tf.cast(example["input_ids"], tf.int32)
            return ids[:-1], ids[1:]

        reader = input_reader.InputReader(
            params=params,
            dataset_fn=tf.data.TFRecordDataset,
            decoder_fn=decode,
            parser_fn=parse,
        )
        return reader.read(input_context=input_context)

    def _build_tfds_inputs(self, params: LMDataConfig, input_context=None):
        import tensorflow_text as tf_text

        if not params.vocab_file:
            raise ValueError(
                f"tfds_name={params.tfds_name!r} needs `vocab_file` (a WordPiece vocab.txt) "
                "to tokenize the text."
            )
        tokenizer = tf_text.BertTokenizer(
            params.vocab_file, lower_case=params.lower_case, token_out_type=tf.int32
        )
        length = params.seq_length + 1
        batch_size = (
            input_context.get_per_replica_batch_size(params.global_batch_size)
            if input_context
            else params.global_batch_size
        )

        def transform_and_batch(dataset, _):
            def tokens(example):
                return tokenizer.tokenize(example[params.text_feature]).merge_dims(0, -1)

            if params.is_training:
                dataset = dataset.repeat()  # Idempotent if TFDS already repeats its files.
            dataset = dataset.map(tokens, num_parallel_calls=tf.data.AUTOTUNE)
            dataset = dataset.flat_map(tf.data.Dataset.from_tensor_slices)
            dataset = dataset.batch(length, drop_remainder=True)
            dataset = dataset.map(lambda ids: (ids[:-1], ids[1:]))
            return dataset.batch(batch_size, drop_remainder=params.drop_remainder)

        reader = input_reader.InputReader(
            params=params,
            dataset_fn=tf.data.TFRecordDataset,
            transform_and_batch_fn=transform_and_batch,
        )
        return reader.read(input_context=input_context)

    def build_losses(self, labels, model_outputs, aux_losses=None) -> tf.Tensor:
        loss = tf_keras.losses.sparse_categorical_crossentropy(
            labels, tf.cast(model_outputs, tf.float32), from_logits=True
        )
        loss = tf.reduce_mean(loss)
        if aux_losses:
            loss += tf.add_n(aux_losses)
        return loss

    def build_metrics(self, training: bool = True):
        return [
            tf_keras.metrics.SparseCategoricalAccuracy(name="token_accuracy"),
            Perplexity(name="perplexity"),
        ]

    def process_metrics(self, metrics, labels, model_outputs, **kwargs):
        logits = tf.cast(model_outputs, tf.float32)
        for metric in metrics:
            if metric.name == "perplexity":
                metric.update_state(
                    tf_keras.losses.sparse_categorical_crossentropy(
                        labels, logits, from_logits=True
                    )
                )
            else:
                metric.update_state(labels, logits)
