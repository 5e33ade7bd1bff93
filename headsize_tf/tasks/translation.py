"""Translation task for Model Garden (`headsize_seq2seq/translation`).

Data: sentence pairs from TFDS (default `wmt14_translate/de-en`, on networked
machines), or from text files of source<TAB>target lines (`tfds_name: ""`,
`input_path: pairs/train*.tsv`; your own parallel data), tokenised with tensorflow-text's `BertTokenizer` from one shared
WordPiece `vocab_file` (`headsize-tf data vocab` builds one from the same
TFDS text). Source = pieces + [SEP]; decoder input = [CLS] + pieces; labels =
pieces + [SEP]; padded with [PAD] (id 0) to `max_seq_length` so every batch
has a static shape (TPUs). Training drops pairs longer than that; evaluation
truncates them instead, so it scores every pair.

Loss: label-smoothed cross-entropy over the non-padding label tokens.
Metrics: token accuracy and perplexity over the same tokens.
"""

from __future__ import annotations

import tensorflow as tf
import tf_keras
from official.core import base_task, input_reader, task_factory

from headsize_tf.configs.translation import (
    BOS,
    EOS,
    PAD,
    TranslationConfig,
    TranslationDataConfig,
    build_seq2seq,
)
from headsize_tf.tasks.language_modeling import Perplexity


def special_ids(vocab_file: str) -> dict[str, int]:
    """Ids of [PAD], [CLS] (begin) and [SEP] (end) in a WordPiece vocab; [PAD] must be 0."""
    with tf.io.gfile.GFile(vocab_file) as f:
        vocab = [line.rstrip("\n") for line in f]
    missing = [t for t in (PAD, BOS, EOS) if t not in vocab]
    if missing:
        raise ValueError(f"vocab_file {vocab_file!r} lacks the tokens {missing}.")
    ids = {t: vocab.index(t) for t in (PAD, BOS, EOS)}
    if ids[PAD] != 0:
        raise ValueError(f"vocab_file {vocab_file!r} must have {PAD} at id 0; got {ids[PAD]}.")
    return ids


def pair_fn(vocab_file: str, max_seq_length: int, lower_case: bool = True, truncate: bool = True):
    """Maps (source text, target text) -> ({"inputs", "targets"}, labels), each [max_seq_length].

    With `truncate=False` the tensors keep their full length (callers filter them).
    """
    import tensorflow_text as tf_text

    if max_seq_length < 2:
        raise ValueError(f"max_seq_length must be >= 2; got {max_seq_length}.")
    tokenizer = tf_text.BertTokenizer(vocab_file, lower_case=lower_case, token_out_type=tf.int32)
    ids = special_ids(vocab_file)
    keep = max_seq_length - 1 if truncate else None

    def pieces(text):
        return tokenizer.tokenize(text).merge_dims(0, -1)[:keep]

    def fn(source, target):
        src, tgt = pieces(source), pieces(target)
        features = {
            "inputs": tf.concat([src, [ids[EOS]]], 0),
            "targets": tf.concat([[ids[BOS]], tgt], 0),
        }
        return features, tf.concat([tgt, [ids[EOS]]], 0)

    # Plain TensorFlow ops: tf.data need not convert it (nor, through it, tensorflow-text).
    return tf.autograph.experimental.do_not_convert(fn)


def pad_pairs(features, labels, length: int):
    """Pads a (features, labels) pair of 1-D tensors to `length` with 0."""

    def pad(t):
        return tf.pad(t, [[0, length - tf.shape(t)[0]]])[:length]

    out = {k: tf.ensure_shape(pad(v), [length]) for k, v in features.items()}
    return out, tf.ensure_shape(pad(labels), [length])


def tsv_pairs(params: TranslationDataConfig, input_context=None) -> tf.data.Dataset:
    """{src_lang: text, tgt_lang: text} from the `input_path` files (source<TAB>target lines).

    Training shuffles (seeded by `params.seed`) and each input pipeline reads
    its shard of the files' lines. A line without exactly one tab stops the
    pipeline with an error naming the expected layout.
    """
    files = sorted(tf.io.gfile.glob(params.input_path))
    if not files:
        raise ValueError(f"No translation data matches input_path={params.input_path!r}.")
    lines = tf.data.TextLineDataset(files)
    if input_context and input_context.num_input_pipelines > 1:
        lines = lines.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    if params.is_training:
        lines = lines.shuffle(params.shuffle_buffer_size, seed=params.seed)

    def split(line):
        parts = tf.strings.split(line, "\t")
        check = tf.debugging.assert_equal(
            tf.size(parts), 2, message=f"{params.input_path}: expected source<TAB>target lines"
        )
        with tf.control_dependencies([check]):
            return {params.src_lang: parts[0], params.tgt_lang: parts[1]}

    return lines.map(split, num_parallel_calls=tf.data.AUTOTUNE)


@task_factory.register_task_cls(TranslationConfig)
class TranslationTask(base_task.Task):
    """Sequence-to-sequence training of a `HeadsizeSeq2Seq`."""

    def build_model(self) -> tf_keras.Model:
        model = build_seq2seq(self.task_config.model)
        dummy = tf.zeros([1, 1], tf.int32)
        model({"inputs": dummy, "targets": dummy})  # Create the weights.
        return model

    def build_inputs(self, params: TranslationDataConfig, input_context=None):
        if not params.tfds_name and not params.input_path:
            raise ValueError(
                "Translation data needs `tfds_name` (e.g. 'wmt14_translate/de-en') or "
                "`input_path` (UTF-8 text files of source<TAB>target lines)."
            )
        if not params.vocab_file:
            source = params.tfds_name or params.input_path
            raise ValueError(
                f"Translation data {source!r} needs `vocab_file` (a WordPiece vocab.txt; "
                "`headsize-tf data vocab` builds one)."
            )
        length = params.max_seq_length
        to_pair = pair_fn(
            params.vocab_file, length, params.lower_case, truncate=not params.is_training
        )
        batch_size = (
            input_context.get_per_replica_batch_size(params.global_batch_size)
            if input_context
            else params.global_batch_size
        )

        def transform_and_batch(dataset, _):
            dataset = dataset.map(
                lambda ex: to_pair(ex[params.src_lang], ex[params.tgt_lang]),
                num_parallel_calls=tf.data.AUTOTUNE,
            )
            if params.is_training:
                dataset = dataset.filter(
                    lambda f, y: tf.logical_and(
                        tf.shape(f["inputs"])[0] <= length, tf.shape(y)[0] <= length
                    )
                )
            dataset = dataset.map(
                lambda f, y: pad_pairs(f, y, length), num_parallel_calls=tf.data.AUTOTUNE
            )
            if params.is_training:
                dataset = dataset.repeat()
            return dataset.batch(batch_size, drop_remainder=params.drop_remainder)

        if not params.tfds_name:
            return transform_and_batch(tsv_pairs(params, input_context), None)
        reader = input_reader.InputReader(
            params=params,
            dataset_fn=tf.data.TFRecordDataset,
            transform_and_batch_fn=transform_and_batch,
        )
        return reader.read(input_context=input_context)

    def build_losses(self, labels, model_outputs, aux_losses=None) -> tf.Tensor:
        logits = tf.cast(model_outputs, tf.float32)
        vocab = tf.shape(logits)[-1]
        smoothing = self.task_config.label_smoothing
        onehot = tf.one_hot(labels, vocab) * (1.0 - smoothing) + smoothing / tf.cast(
            vocab, tf.float32
        )
        loss = tf.nn.softmax_cross_entropy_with_logits(onehot, logits)
        weights = tf.cast(tf.not_equal(labels, 0), tf.float32)
        loss = tf.reduce_sum(loss * weights) / tf.maximum(tf.reduce_sum(weights), 1.0)
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
        weights = tf.cast(tf.not_equal(labels, 0), tf.float32)
        for metric in metrics:
            if metric.name == "perplexity":
                metric.update_state(
                    tf_keras.losses.sparse_categorical_crossentropy(
                        labels, logits, from_logits=True
                    ),
                    sample_weight=weights,
                )
            else:
                metric.update_state(labels, logits, sample_weight=weights)
