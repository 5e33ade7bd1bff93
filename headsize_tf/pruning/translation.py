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

from headsize_tf.core.spec import AttentionSpec
from headsize_tf.modeling.seq2seq import HeadsizeSeq2Seq
from headsize_tf.pruning.importance import head_importance
from headsize_tf.pruning.language_model import (
    REPORT_FILE,
    copy_other_weights,
    decoding_speed,
    plot_report,
    save_model_dir,
)
from headsize_tf.pruning.remove import copy_kept_heads
from headsize_tf.pruning.schedule import (
    check_min_heads,
    check_output,
    masked_schedule,
    split_config,
)

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


def seq2seq_head_mask(model: HeadsizeSeq2Seq) -> np.ndarray:
    """`[attention layers, max heads]` gates (current head positions; missing heads 0)."""
    rows = attention_rows(model)
    mask = np.zeros([len(rows), max(r.attention.num_heads for r in rows)], np.float32)
    for i, row in enumerate(rows):
        mask[i, : row.attention.num_heads] = row.attention.head_gates.numpy()
    return mask


def set_seq2seq_head_mask(model: HeadsizeSeq2Seq, mask: np.ndarray) -> None:
    for i, row in enumerate(attention_rows(model)):
        row.attention.set_head_mask(np.asarray(mask, np.float32)[i, : row.attention.num_heads])


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


def perplexity(model: HeadsizeSeq2Seq, data: Sequence[tuple[dict, np.ndarray]]) -> float:
    @tf.function(reduce_retracing=True)
    def totals(features, labels):
        loss = tf_keras.losses.sparse_categorical_crossentropy(
            labels, tf.cast(model(features, training=False), tf.float32), from_logits=True
        )
        weights = tf.cast(tf.not_equal(labels, 0), tf.float32)
        return tf.reduce_sum(loss * weights), tf.reduce_sum(weights)

    loss, tokens = 0.0, 0.0
    for features, labels in data:
        batch_loss, batch_tokens = totals(features, labels)
        loss, tokens = loss + float(batch_loss), tokens + float(batch_tokens)
    return float(np.exp(loss / max(tokens, 1.0)))


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

            @tf.function(reduce_retracing=True)
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
    rows = attention_rows(model)
    layers = [r.attention for r in rows]
    scores = head_importance(model, data, token_loss, layers=layers, normalize=normalize)
    out = np.full(seq2seq_head_mask(model).shape, np.nan)
    for i, layer in enumerate(layers):
        out[i, : layer.num_heads] = scores[i, : layer.num_heads]
    return out


def remove_seq2seq_heads(model: HeadsizeSeq2Seq, mask: np.ndarray) -> HeadsizeSeq2Seq:
    """A new model without the heads whose mask entry is 0; `pruned_heads` in its config.

    Every layer must keep a head. The source is left unchanged.
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
    for row, new_row, positions in zip(rows, attention_rows(new), keep, strict=True):
        copy_kept_heads(row.attention, new_row.attention, positions)
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
    """`headsize-tf prune --model_dir` of a translation model: importance, curve, removal.

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
    importance_data = translation_batches(params, "train", importance_batches, importance_seed)
    eval_data = translation_batches(params, "validation", eval_batches)
    rows = attention_rows(model)
    chosen = [i for i, r in enumerate(rows) if r.kind in kinds]
    original = seq2seq_head_mask(model)

    def full(sub: np.ndarray) -> np.ndarray:
        mask = original.copy()
        mask[chosen] = sub
        return mask

    data = params.task.validation_data
    bleu = TranslationBleu(eval_data, data.vocab_file, data.lower_case)
    bleus: list[float] = []  # One per schedule step, with its perplexity.

    def evaluate() -> float:
        bleus.append(bleu(model))
        return perplexity(model, eval_data)

    full_importance = seq2seq_importance(model, importance_data)
    steps = masked_schedule(
        original[chosen],
        lambda sub: set_seq2seq_head_mask(model, full(sub)),
        lambda: seq2seq_importance(model, importance_data)[chosen],
        evaluate,
        target_fraction=target_fraction,
        step=step,
        recompute=recompute,
        min_heads_per_layer=min_heads_per_layer,
        progress=progress,
    )
    final = full(np.asarray(steps[-1].mask, np.float32))
    pruned = remove_seq2seq_heads(model, final)
    set_seq2seq_head_mask(model, final)
    masked = perplexity(model, eval_data)
    masked_bleu = bleu(model)
    set_seq2seq_head_mask(model, original)
    source = eval_data[0][0]["inputs"][:8]
    start = np.full([len(source), 1], 2, np.int32)  # [CLS] starts every target.
    speed = {
        "original": decoding_speed(model, start, decode_tokens, source_ids=source),
        "pruned": decoding_speed(pruned, start, decode_tokens, source_ids=source),
    }

    def by_kind(mask: np.ndarray) -> dict[str, list[int]]:
        return {
            kind: [int(np.count_nonzero(mask[i])) for i, r in enumerate(rows) if r.kind == kind]
            for kind in KINDS
        }

    report = {
        "source": str(model_dir),
        "kinds": list(kinds),
        "target_fraction": target_fraction,
        "step": step,
        "recompute": recompute,
        "importance_seed": importance_seed,
        "importance": {
            kind: [
                [None if np.isnan(v) else float(v) for v in full_importance[i]]
                for i, r in enumerate(rows)
                if r.kind == kind
            ]
            for kind in KINDS
        },
        "curve": [
            {
                "fraction": s.fraction,
                "perplexity": s.metric,
                "bleu": b,
                "heads": by_kind(full(np.asarray(s.mask))),
            }
            for s, b in zip(steps, bleus, strict=True)
        ],
        "heads": {"original": by_kind(original), "pruned": by_kind(final)},
        "pruned_heads": pruned.get_config()["pruned_heads"],
        "params": {"original": int(model.count_params()), "pruned": int(pruned.count_params())},
        "perplexity": {
            "original": steps[0].metric,
            "masked": masked,
            "pruned": perplexity(pruned, eval_data),
        },
        "bleu": {
            "original": bleus[0],
            "masked": masked_bleu,
            "pruned": bleu(pruned),
            "sentences": len(bleu.references),
        },
        "decoding_tokens_per_second": speed,
        "decoding_speedup": speed["pruned"] / speed["original"],
    }
    override = {
        "pruned_heads": json.dumps(report["pruned_heads"]),
        "attention": pruned.get_config()["attention"],
    }
    path = save_model_dir(
        params,
        pruned,
        output,
        EXPERIMENT,
        override,
        {REPORT_FILE: json.dumps(report, indent=2)},
        overwrite=overwrite,
    )
    plot_report(report, path)
    return report


__all__ = [
    "KINDS",
    "TranslationBleu",
    "corpus_bleu",
    "attention_rows",
    "prune_translation_model",
    "remove_seq2seq_heads",
    "seq2seq_head_mask",
    "seq2seq_importance",
    "set_seq2seq_head_mask",
]
