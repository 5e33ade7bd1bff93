"""Causal language modeling task: input pipeline, loss, perplexity (Model Garden `Task`)."""

from __future__ import annotations

import tensorflow as tf
import tf_keras
from official.core import base_task, input_reader, task_factory

from headsize_tf.configs.language_modeling import (
    LanguageModelingConfig,
    LMDataConfig,
    build_lm,
)


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
            # Unconverted: autograph would convert tensorflow-text's tokenizer.
            tokens = tf.autograph.experimental.do_not_convert(tokens)
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
