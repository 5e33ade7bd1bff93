"""Pruning the heads of a translation model trained by `headsize-tf train`.

The model trains on tfds' mock wmt14 data (no download works here) through the
code users run on Colab; pruning then reads the same data from the model_dir's
config.
"""

import json
import pathlib

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from headsize_tf import cli
from headsize_tf.modeling.decoding import greedy_decode
from headsize_tf.pruning import language_model as plm
from headsize_tf.pruning import translation as ptr
from headsize_tf.pruning.remove import set_head_mask
from headsize_tf.training import train

ROOT = pathlib.Path(__file__).resolve().parents[2]
TINY_WMT = str(ROOT / "official_configs" / "cordonnier_nmt" / "tiny.yaml")
LETTERS = list("abcdefghij")
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + LETTERS + [f"##{c}" for c in LETTERS]
# An eager training loop: a few steps of a tiny model run in less time than tracing the
# loop's graph takes; the tests read the run's checkpoint and config, not its loop.
EAGER = "trainer.train_tf_function=false,trainer.train_tf_while_loop=false"
# Batches of 4: `prune --model_dir` scores heads on 8 training batches and measures
# perplexity and greedy BLEU on 8 validation batches (the run's batch sizes) at every point
# of its curve; 8 batches of 4 are the 32 mock validation pairs. Validation pairs of 16
# pieces: greedy decoding runs to the references' length (64 pieces by default).
SHORT = (
    f"{EAGER},trainer.train_steps=4,trainer.steps_per_loop=4,trainer.summary_interval=4,"
    "trainer.checkpoint_interval=4,trainer.validation_interval=4,trainer.validation_steps=1,"
    "task.model.vocab_size=25,task.train_data.global_batch_size=4,"
    "task.validation_data.global_batch_size=4,task.validation_data.max_seq_length=16"
)


def mock():
    return tfds.testing.mock_data(num_examples=32, policy=tfds.testing.MockPolicy.USE_CODE)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(model_dir, data_dir): a tiny standard seq2seq (2 + 2 layers of 4 heads), 4 steps."""
    data_dir = tmp_path_factory.mktemp("data")
    (data_dir / "wmt14").mkdir()
    (data_dir / "wmt14" / "vocab.txt").write_text("\n".join(VOCAB))
    model_dir = str(data_dir / "model")
    with mock():
        train.run(  # mode="train": the tests evaluate the model_dir themselves.
            "headsize_seq2seq/translation",
            model_dir,
            [TINY_WMT],
            SHORT,
            mode="train",
            data_dir=str(data_dir),
        )
    return model_dir


def test_removal_equals_masking_per_kind_and_cached_decoding_agrees(trained):
    _, model = train.load_trained_model(trained)
    rows = ptr.attention_rows(model)
    assert [r.kind for r in rows] == ["encoder_self"] * 2 + ["decoder_self", "encoder_decoder"] * 2
    mask = np.ones([6, 4], np.float32)
    mask[0, 1] = mask[2, [0, 3]] = mask[5, 2] = 0  # One of each kind.
    pruned = ptr.remove_seq2seq_heads(model, mask)
    assert [r.attention.num_heads for r in ptr.attention_rows(pruned)] == [3, 4, 2, 4, 4, 3]
    assert pruned.get_config()["pruned_heads"] == {
        "encoder": [{"self_attention": [1]}, {"self_attention": []}],
        "decoder": [
            {"self_attention": [0, 3], "cross_attention": []},
            {"self_attention": [], "cross_attention": [2]},
        ],
    }
    rng = np.random.default_rng(0)
    features = {
        "inputs": rng.integers(5, 25, (3, 9)).astype(np.int32),
        "targets": rng.integers(5, 25, (3, 7)).astype(np.int32),
    }
    set_head_mask(model, mask)
    np.testing.assert_allclose(pruned(features).numpy(), model(features).numpy(), atol=1e-5)
    # Each removed head held 4 * 64 * 16 kernel weights and 3 * 16 biases.
    assert model.count_params() - pruned.count_params() == 4 * (4 * 64 * 16 + 3 * 16)
    start = np.full([3, 1], 2, np.int32)
    cached = greedy_decode(pruned, start, 6, source_ids=features["inputs"]).numpy()
    uncached = greedy_decode(pruned, start, 6, use_cache=False, source_ids=features["inputs"])
    np.testing.assert_array_equal(cached, uncached.numpy())
    # Pruning again works in the original head numbering.
    again = np.ones([6, 4], np.float32)
    again[0, 0] = 0  # Position 0 of layer 0 is original head 0 (head 1 is gone).
    twice = ptr.remove_seq2seq_heads(pruned, again)
    assert twice.get_config()["pruned_heads"]["encoder"][0] == {"self_attention": [0, 1]}


def test_importance_batches_are_the_same_at_every_call(trained):
    """Training data shuffles; the importance batches use a fixed seed, so a rerun scores
    heads on the same pairs (with Model Garden's default, a new seed each time)."""
    params, _ = train.load_trained_model(trained)
    with mock():
        first = ptr.translation_batches(params, "train", 3)
        again = ptr.translation_batches(params, "train", 3)
    for (f1, y1), (f2, y2) in zip(first, again, strict=True):
        np.testing.assert_array_equal(f1["inputs"], f2["inputs"])
        np.testing.assert_array_equal(y1, y2)


@pytest.mark.slow  # end to end, in the full run (docs/testing.md)
def test_cli_prunes_one_kind_into_a_model_dir(trained, tmp_path, capsys):
    out = tmp_path / "pruned"
    argv = [
        "prune",
        "--model_dir",
        trained,
        "--attention-kinds",
        "encoder_decoder",
        "--target-fraction",
        "0.25",
        "--step",
        "0.125",
        "--output",
        str(out),
    ]
    with mock():
        assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    report = json.loads((out / plm.REPORT_FILE).read_text())
    assert [c["fraction"] for c in report["curve"]] == [0.0, 0.125, 0.25]
    heads = report["heads"]["pruned"]
    assert heads["encoder_self"] == [4, 4] and heads["decoder_self"] == [4, 4]
    assert sum(heads["encoder_decoder"]) == 6  # 25% of the 8 encoder-decoder heads went.
    assert report["perplexity"]["pruned"] == pytest.approx(report["perplexity"]["masked"], 1e-4)
    # Removal changes no translation: the same greedy outputs, the same BLEU (8 batches of 4).
    bleu = report["bleu"]
    assert bleu["pruned"] == pytest.approx(bleu["masked"], abs=1e-6)
    assert bleu["original"] == report["curve"][0]["bleu"]
    assert bleu["sentences"] == 32 and all(0 <= c["bleu"] <= 100 for c in report["curve"])
    assert f"{bleu['original']:.2f} -> {bleu['pruned']:.2f}" in printed
    assert f"{report['decoding_speedup']:.2f}x" in printed
    for figure in ("importance.png", "curve.png"):  # The report's heatmap and curves.
        assert (out / figure).stat().st_size > 10_000
    params, model = train.load_trained_model(str(out))
    assert json.loads(params.task.model.pruned_heads) == report["pruned_heads"]
    assert model.count_params() == report["params"]["pruned"]
    assert [
        r.attention.num_heads for r in ptr.attention_rows(model) if r.kind == "encoder_decoder"
    ] == heads["encoder_decoder"]
    export = [
        "export",
        "--model_dir",
        str(out),
        "--task",
        "translation",
        "--output",
        str(tmp_path / "export"),
    ]
    assert cli.main(export) == 0
    loaded = tf.saved_model.load(str(tmp_path / "export" / "1"))
    assert loaded.signatures["serving_default"](text=tf.constant(["abc de"]))


def _bleu_oracle(references, hypotheses, max_order=4):
    """Papineni et al.'s corpus BLEU (clipped n-gram precisions, brevity penalty), with
    T2T's smoothing of an order without matches (1 / (2^k * possible)) and its skipping
    of an order no hypothesis is long enough for."""
    from collections import Counter

    matches, possible = [0] * max_order, [0] * max_order
    for ref, hyp in zip(references, hypotheses, strict=True):
        for n in range(1, max_order + 1):
            r = Counter(tuple(ref[i : i + n]) for i in range(len(ref) - n + 1))
            h = Counter(tuple(hyp[i : i + n]) for i in range(len(hyp) - n + 1))
            matches[n - 1] += sum(min(c, r[g]) for g, c in h.items())
            possible[n - 1] += max(len(hyp) - n + 1, 0)
    smooth, logs = 1.0, []
    for m, p in zip(matches, possible, strict=True):
        if not p:
            logs.append(0.0)  # T2T: an order longer than every hypothesis adds log 1.
        elif m:
            logs.append(np.log(m / p))
        else:
            smooth *= 2
            logs.append(np.log(1 / (smooth * p)))
    ratio = sum(map(len, hypotheses)) / sum(map(len, references))
    penalty = 1.0 if ratio >= 1 else np.exp(1 - 1 / ratio)
    return 100 * penalty * np.exp(np.mean(logs))


def test_corpus_bleu_matches_the_papineni_oracle():
    refs = [["the", "cat", "sat", "on", "the", "mat"], ["a", "b", "c", "d", "e"]]
    hyps = [["the", "cat", "sat", "on", "a", "mat"], ["a", "b", "c", "d"]]
    assert ptr.corpus_bleu(refs, hyps) == pytest.approx(_bleu_oracle(refs, hyps), rel=1e-5)
    assert ptr.corpus_bleu(refs, refs) == pytest.approx(100.0)
    short = [["the", "cat"], ["a"]]  # A brevity penalty and smoothed orders.
    assert ptr.corpus_bleu(refs, short) == pytest.approx(_bleu_oracle(refs, short), rel=1e-5)
    with pytest.raises(ValueError, match="2 references for 1 hypotheses"):
        ptr.corpus_bleu(refs, hyps[:1])


def test_bleu_reads_references_up_to_the_end_token(trained, tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(VOCAB))
    labels = np.array([[5, 15, 6, 3, 0, 0], [7, 3, 9, 0, 0, 0]], np.int32)  # 3 = [SEP]
    data = [({"inputs": np.array([[5, 3], [6, 3]], np.int32)}, labels)]
    bleu = ptr.TranslationBleu(data, str(vocab))
    assert bleu.references == [["aa", "b"], ["c"]]  # "##a" joins "a"; after [SEP] is ignored.
    _, model = train.load_trained_model(trained)
    translations = bleu.translations(model)
    assert len(translations) == 2 and all(len(t) <= 6 for t in translations)
    assert bleu(model) == pytest.approx(ptr.corpus_bleu(bleu.references, translations))


def test_bad_kinds_are_one_line_errors(trained, tmp_path, capsys):
    lm_args = [
        "prune",
        "--model_dir",
        trained,
        "--attention-kinds",
        "cross",
        "--output",
        str(tmp_path / "o"),
    ]
    with pytest.raises(SystemExit) as exit_info:
        cli.main(lm_args)
    assert exit_info.value.code == 2
    assert "invalid choice: 'cross'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "attention, kind",
    [
        ({"kind": "standard", "num_heads": 4}, "fixed_head"),
        ({"kind": "fixed_head", "num_heads": 4, "head_size": 8}, "fixed_head"),
        ({"kind": "collaborative", "num_heads": 4, "shared_key_dim": 16}, "collaborative"),
    ],
)
def test_every_attention_kind_removes_heads(attention, kind):
    from headsize_tf.modeling.seq2seq import HeadsizeSeq2Seq

    model = HeadsizeSeq2Seq(
        vocab_size=30,
        hidden_size=32,
        num_encoder_layers=1,
        num_decoder_layers=1,
        attention=attention,
        max_sequence_length=16,
    )
    features = {
        "inputs": (np.arange(12).reshape(2, 6) % 29 + 1).astype(np.int32),
        "targets": (np.arange(10).reshape(2, 5) % 29 + 1).astype(np.int32),
    }
    model(features)
    mask = np.ones([3, 4], np.float32)
    mask[0, 1] = mask[1, 0] = mask[1, 2] = mask[2, 3] = 0
    pruned = ptr.remove_seq2seq_heads(model, mask)
    assert pruned.get_config()["attention"]["kind"] == kind  # Standard heads keep their size.
    set_head_mask(model, mask)
    np.testing.assert_allclose(pruned(features).numpy(), model(features).numpy(), atol=1e-5)
