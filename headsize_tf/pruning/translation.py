"""Head pruning of a trained translation Transformer (Michel et al. 2019, Sec. 4-5).

A `HeadsizeSeq2Seq` has three kinds of attention: encoder self-attention
("encoder_self"), decoder self-attention ("decoder_self") and encoder-decoder
attention ("encoder_decoder"). Importance is E|dL/dxi_h| of the translation
loss (token cross entropy on training pairs), normalised per layer; heads of
the chosen kinds are pruned `step` of those heads at a time (importance
recomputed after each step by default) while the validation perplexity and the
BLEU of greedy translations are recorded; the pruned heads are then removed. The model config records the
removed heads (`task.model.pruned_heads`, original numbering), so the output
is an ordinary `headsize-tf train` model_dir: it reloads, decodes with the
cache, exports and prunes again.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras

from headsize_tf.core.prune_loop import PruneSchedule, prune_loop
from headsize_tf.core.spec import AttentionSpec
from headsize_tf.layers.roles import kind_of
from headsize_tf.modeling.seq2seq import HeadsizeSeq2Seq
from headsize_tf.pruning.adapter import KerasModelAdapter
from headsize_tf.pruning.importance import mask_importance
from headsize_tf.pruning.language_model import (
    REPORT_FILE,
    copy_other_weights,
    decoding_speed,
    plot_report,
    save_model_dir,
)
from headsize_tf.pruning.remove import (
    copy_kept_heads,
    mask_kept,
    physical_keep,
)
from headsize_tf.pruning.schedule import check_min_heads, check_output, split_config
from headsize_tf.training.evaluation import perplexity

KINDS = ("encoder_self", "decoder_self", "encoder_decoder")
EXPERIMENT = "headsize_seq2seq/translation"


@dataclasses.dataclass(frozen=True)
class AttentionRow:
    """One attention layer of the model: its kind, block index and attribute."""

    kind: str
    layer: int
    block: Any
    attribute: str

    @property
    def attention(self):
        return getattr(self.block, self.attribute)

    def original_heads(self) -> list[int]:
        """Original indices of the heads the layer still has."""
        removed = set(self.block.pruned_heads.get(self.attribute, []))
        total = self.attention.num_heads + len(removed)
        return [h for h in range(total) if h not in removed]


def attention_rows(model: HeadsizeSeq2Seq) -> list[AttentionRow]:
    rows = [
        AttentionRow("encoder_self", i, b, "self_attention")
        for i, b in enumerate(model.encoder_blocks)
    ]
    for i, block in enumerate(model.decoder.blocks):
        rows.append(AttentionRow("decoder_self", i, block, "self_attention"))
        rows.append(AttentionRow("encoder_decoder", i, block, "cross_attention"))
    return rows


def translation_batches(
    params, split: str, batches: int, seed: int | None = None
) -> list[tuple[dict, np.ndarray]]:
    """The first `batches` (features, labels) batches of the task's `split` data."""
    from official.core import task_factory

    task = task_factory.get_task(params.task)
    config = split_config(params, split, seed)
    return [
        ({k: v.numpy() for k, v in features.items()}, labels.numpy())
        for features, labels in task.build_inputs(config).take(batches)
    ]


def token_loss(labels, logits) -> tf.Tensor:
    """Mean cross entropy over the non-padding target tokens."""
    loss = tf_keras.losses.sparse_categorical_crossentropy(
        labels, tf.cast(logits, tf.float32), from_logits=True
    )
    weights = tf.cast(tf.not_equal(labels, 0), tf.float32)
    return tf.reduce_sum(loss * weights) / tf.maximum(tf.reduce_sum(weights), 1.0)


def corpus_bleu(references: Sequence[Sequence[str]], hypotheses: Sequence[Sequence[str]]) -> float:
    """Corpus BLEU x 100 of tokenised sentences (one reference each): Papineni et al.'s
    4-gram geometric mean with the brevity penalty, as Model Garden's `compute_bleu`
    (T2T's, which smooths an n-gram order without matches)."""
    from official.nlp.metrics.bleu import compute_bleu

    if len(references) != len(hypotheses):
        raise ValueError(f"{len(references)} references for {len(hypotheses)} hypotheses.")
    return 100.0 * float(compute_bleu([list(r) for r in references], [list(h) for h in hypotheses]))


class TranslationBleu:
    """Greedy translations of a batch list's sources scored against its labels.

    Hypothesis and reference are both the task's WordPiece ids turned into words
    (so BLEU is case-insensitive with the pipeline's lower-casing and punctuation
    splitting, and references are truncated to the validation data's max_seq_length); decoding stops
    at [SEP] or at the labels' length.

    Args:
      data: `translation_batches` output.
      vocab_file, lower_case: The task's vocabulary.
    """

    def __init__(
        self, data: Sequence[tuple[dict, np.ndarray]], vocab_file: str, lower_case: bool = True
    ):
        import tensorflow_text as tf_text

        from headsize_tf.tasks.translation import BOS, EOS, special_ids

        ids = special_ids(vocab_file)
        self._bos, self._eos = ids[BOS], ids[EOS]
        self._tokenizer = tf_text.BertTokenizer(vocab_file, lower_case=lower_case)
        self._sources = [features["inputs"] for features, _ in data]
        self._length = max(labels.shape[1] for _, labels in data)
        self.references = [w for _, labels in data for w in self.words(labels)]
        self._decoders: dict[int, tuple[HeadsizeSeq2Seq, Any]] = {}  # Model kept: ids stay.

    def words(self, ids: np.ndarray) -> list[list[str]]:
        """Each row's words up to its first [SEP] (padding dropped)."""
        rows = []
        for row in np.asarray(ids):
            ends = np.flatnonzero(row == self._eos)
            row = row[: ends[0]] if len(ends) else row
            rows.append(row[row != 0])
        words = self._tokenizer.detokenize(tf.ragged.constant(rows, dtype=tf.int64, ragged_rank=1))
        return [[w.decode() for w in sentence] for sentence in words.to_list()]

    def translations(self, model: HeadsizeSeq2Seq) -> list[list[str]]:
        from headsize_tf.modeling.decoding import greedy_decode_loop

        if id(model) not in self._decoders:  # One trace per model, reused at every step.

            @tf.function(reduce_retracing=True, autograph=False)
            def decode(source):
                start = tf.fill([tf.shape(source)[0], 1], self._bos)
                return greedy_decode_loop(model, start, self._length, self._eos, source)

            self._decoders[id(model)] = (model, decode)
        decode = self._decoders[id(model)][1]
        return [w for source in self._sources for w in self.words(decode(source).numpy())]

    def __call__(self, model: HeadsizeSeq2Seq) -> float:
        """BLEU x 100 of `model`'s greedy translations."""
        return corpus_bleu(self.references, self.translations(model))


def seq2seq_importance(model: HeadsizeSeq2Seq, data, normalize: bool = True) -> np.ndarray:
    """`[attention layers, max heads]` importance (NaN where a layer has fewer heads)."""
    return mask_importance(model, data, token_loss, normalize=normalize)


class TranslationAdapter(KerasModelAdapter):
    """A `headsize_seq2seq/translation` run as a `ModelAdapter`: token loss on training
    pairs; validation perplexity and greedy BLEU; attention kinds `KINDS`.

    Args:
      params: The run's config.
      model: Its `HeadsizeSeq2Seq`.
      importance_data, eval_data: `translation_batches` of the train / validation data.
      bleu: `TranslationBleu` of `eval_data`.
      source: The model_dir.

    Example:

    >>> adapter = TranslationAdapter(params, model, train_batches, dev_batches, bleu, "runs/nmt")
    >>> prune_loop(adapter, PruneSchedule(kinds=("decoder_self",)), "runs/nmt_pruned")
    """

    metric_name = "perplexity"
    report_file = REPORT_FILE

    def __init__(self, params, model, importance_data, eval_data, bleu, source: str):
        kinds = [r.kind for r in attention_rows(model)]
        super().__init__(model, None, token_loss, importance_data, source, kinds)
        self.params, self.eval_data, self.bleu = params, eval_data, bleu

    def original_heads(self) -> list[list[int]]:
        width = self.head_mask().shape[1]
        rows = [r.original_heads() for r in attention_rows(self.model)]
        return [r + [-1] * (width - len(r)) for r in rows]

    def evaluate(self) -> dict[str, float]:
        bleu = self.bleu(self.model)
        return {"perplexity": perplexity(self.model, self.eval_data, pad_id=0), "bleu": bleu}

    def count_params(self) -> int:
        return int(self.model.count_params())

    def remove_heads(self, mask: np.ndarray) -> TranslationAdapter:
        pruned = remove_seq2seq_heads(self.model, mask)
        return TranslationAdapter(
            self.params, pruned, self.importance_data, self.eval_data, self.bleu, self.source
        )

    def save(self, output, report, overwrite: bool = False):
        config = self.model.get_config()
        override = {
            "pruned_heads": json.dumps(config["pruned_heads"]),
            "attention": config["attention"],
        }
        return save_model_dir(
            self.params,
            self.model,
            output,
            EXPERIMENT,
            override,
            {REPORT_FILE: json.dumps(report, indent=2)},
            overwrite=overwrite,
        )

    def reload(self, path) -> TranslationAdapter:
        from headsize_tf.training import train

        params, model = train.load_trained_model(str(path))
        return TranslationAdapter(
            params, model, self.importance_data, self.eval_data, self.bleu, self.source
        )


def remove_seq2seq_heads(model: HeadsizeSeq2Seq, mask: np.ndarray) -> HeadsizeSeq2Seq:
    """A new model without the heads whose mask entry is 0; `pruned_heads` in its config.

    Every layer must keep a head. Grouped-query layers lose whole groups only
    (a kept group's pruned heads stay masked). The source is left unchanged.
    """
    mask = np.asarray(mask, np.float32)
    rows = attention_rows(model)
    pruned: dict[str, list[dict[str, list[int]]]] = {
        "encoder": [{} for _ in model.encoder_blocks],
        "decoder": [{} for _ in model.decoder.blocks],
    }
    keep = []
    for i, row in enumerate(rows):
        positions = [p for p in range(row.attention.num_heads) if mask[i, p] != 0]
        if not positions:
            raise ValueError(f"{row.kind} layer {row.layer} would lose every head; keep one.")
        positions = physical_keep(row.attention, positions)  # Grouped: whole groups.
        keep.append(positions)
        original = row.original_heads()
        kept = {original[p] for p in positions}
        side = "encoder" if row.kind == "encoder_self" else "decoder"
        pruned[side][row.layer][row.attribute] = sorted(
            set(row.block.pruned_heads.get(row.attribute, [])) | (set(original) - kept)
        )
    config = dict(model.get_config())
    config.pop("name", None)
    config["pruned_heads"] = pruned
    # A pruned block needs its head size in the spec: standard heads become fixed-head
    # layers of their size, collaborative ones get theirs written out.
    sizes = {r.kind: r.attention.head_size for r in rows}
    for key, kind in (("attention", "encoder_self"), ("decoder_attention", "decoder_self")):
        if config.get(key) is None:
            continue
        spec = AttentionSpec.coerce(config[key])
        if spec.kind == "standard":
            spec = dataclasses.replace(spec, kind="fixed_head", head_size=sizes[kind])
        elif spec.head_size is None:
            spec = dataclasses.replace(spec, head_size=sizes[kind])
        config[key] = spec.to_dict()
    new = HeadsizeSeq2Seq.from_config(config)
    dummy = tf.zeros([1, 2], tf.int32)
    new({"inputs": dummy, "targets": dummy})
    copy_other_weights(model, new)
    for i, (row, new_row, positions) in enumerate(
        zip(rows, attention_rows(new), keep, strict=True)
    ):
        copy_kept_heads(row.attention, new_row.attention, positions)
        if kind_of(row.attention) == "grouped":  # Pruned heads of kept groups stay masked.
            mask_kept(row.attention, new_row.attention, positions, mask[i])
    return new


def prune_translation_model(
    model_dir: str | os.PathLike,
    output: str | os.PathLike,
    *,
    kinds: Sequence[str] = KINDS,
    target_fraction: float = 0.5,
    step: float = 0.1,
    recompute: bool = True,
    min_heads_per_layer: int = 1,
    importance_batches: int = 8,
    eval_batches: int = 8,
    decode_tokens: int = 16,
    importance_seed: int | None = None,
    overwrite: bool = False,
    progress: bool = True,
) -> dict[str, Any]:
    """`headsize-tf prune --model-dir` of a translation model: importance, curve, removal.

    Args:
      model_dir: A `headsize_seq2seq/translation` model_dir.
      output: The pruned model_dir written (with `pruning_report.json`).
      kinds: Attention kinds whose heads may be pruned (fractions count their
        heads only); the others keep every head.
      target_fraction, step, recompute, min_heads_per_layer: The schedule.
      importance_batches: Training batches the importance is averaged over.
      eval_batches: Validation batches of the perplexity.
      decode_tokens: Tokens generated per sentence for the decoding speed.
      importance_seed: Shuffle seed of the training batches the importance
        is averaged over (default: the run's, or 0); another seed draws
        other batches.
      overwrite: Replace an existing `output`.

    Returns:
      The report: importance per kind, curve (validation perplexity and greedy
      BLEU on the `eval_batches`), heads per layer and kind, parameters,
      perplexity and BLEU before / masked / after removal, cached greedy
      decoding tokens/s before and after (side by side).
    """
    from headsize_tf.training import train

    unknown = sorted(set(kinds) - set(KINDS))
    if unknown or not kinds:
        raise ValueError(
            f"Attention kinds {unknown or list(kinds)}; expected some of {list(KINDS)}."
        )
    check_output(output, overwrite)
    check_min_heads(min_heads_per_layer, "a translation model")
    params, model = train.load_trained_model(str(model_dir))
    if not isinstance(model, HeadsizeSeq2Seq):
        raise ValueError(f"{model_dir} is not a {EXPERIMENT} model_dir.")
    eval_data = translation_batches(params, "validation", eval_batches)
    data = params.task.validation_data
    adapter = TranslationAdapter(
        params,
        model,
        translation_batches(params, "train", importance_batches, importance_seed),
        eval_data,
        TranslationBleu(eval_data, data.vocab_file, data.lower_case),
        str(model_dir),
    )
    rows = attention_rows(model)

    def by_kind(mask) -> dict[str, list[int]]:
        mask = np.asarray(mask)
        return {
            kind: [int(np.count_nonzero(mask[i])) for i, r in enumerate(rows) if r.kind == kind]
            for kind in KINDS
        }

    def extras(report: dict[str, Any], pruned: TranslationAdapter) -> None:
        source = eval_data[0][0]["inputs"][:8]
        start = np.full([len(source), 1], 2, np.int32)  # [CLS] starts every target.
        speed = {
            "original": decoding_speed(model, start, decode_tokens, source_ids=source),
            "pruned": decoding_speed(pruned.model, start, decode_tokens, source_ids=source),
        }
        scores = report["importance"]
        report["kinds"] = list(kinds)
        report["importance_seed"] = importance_seed
        report["importance"] = {  # The rows by kind.
            kind: [scores[i] for i, r in enumerate(rows) if r.kind == kind] for kind in KINDS
        }
        for point in report["curve"]:
            point["heads"] = by_kind(point["mask"])
        report["heads"] = {
            "original": by_kind(report["curve"][0]["mask"]),
            "pruned": by_kind(report["curve"][-1]["mask"]),
        }
        report["pruned_heads"] = pruned.model.get_config()["pruned_heads"]
        report["bleu"]["sentences"] = len(adapter.bleu.references)
        report["decoding_tokens_per_second"] = speed
        report["decoding_speedup"] = speed["pruned"] / speed["original"]

    schedule = PruneSchedule(
        target_fraction, step, recompute, min_heads_per_layer, kinds=tuple(kinds)
    )
    report = prune_loop(
        adapter, schedule.with_progress(progress), output, overwrite=overwrite, extras=extras
    )
    plot_report(report, output)
    return report


__all__ = [
    "KINDS",
    "TranslationAdapter",
    "TranslationBleu",
    "corpus_bleu",
    "attention_rows",
    "prune_translation_model",
    "remove_seq2seq_heads",
    "seq2seq_importance",
]
