"""Translation from the user's own parallel text: source<TAB>target files (`input_path`)."""

import pathlib

import numpy as np
import pytest
import tensorflow as tf

from headsize_tf import cli
from headsize_tf.configs import translation
from headsize_tf.tasks import translation as tr_task
from headsize_tf.training import train

ROOT = pathlib.Path(__file__).resolve().parents[2]
TINY_WMT = str(ROOT / "official_configs" / "cordonnier_nmt" / "tiny.yaml")
LETTERS = list("abcdefghij")
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + LETTERS + [f"##{c}" for c in LETTERS]


def piece_ids(text: str) -> list[int]:
    return [VOCAB.index(c if i == 0 else f"##{c}") for w in text.split() for i, c in enumerate(w)]


def _pairs(n: int, seed: int) -> list[tuple[str, str]]:
    """A learnable toy language: the target is the source with its words reversed."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        words = ["".join(rng.choice(LETTERS, size=rng.integers(1, 4))) for _ in range(4)]
        out.append((" ".join(words), " ".join(reversed(words))))
    return out


@pytest.fixture
def data(tmp_path):
    (tmp_path / "vocab.txt").write_text("\n".join(VOCAB))
    for split, n, seed in (("train", 512, 0), ("dev", 64, 1)):
        lines = [f"{a}\t{b}" for a, b in _pairs(n, seed)]
        (tmp_path / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    return tmp_path


def _override(data: pathlib.Path) -> dict:
    def split(name: str, training: bool) -> dict:
        return {
            "tfds_name": "",
            "input_path": str(data / f"{name}.tsv"),
            "vocab_file": str(data / "vocab.txt"),
            "max_seq_length": 16,
            "global_batch_size": 16,
            "is_training": training,
            "seed": 0,
            "drop_remainder": training,
        }

    return {
        "task": {
            "model": {"vocab_size": 25, "max_sequence_length": 16},
            "train_data": split("train", True),
            "validation_data": split("dev", False),
        },
        "trainer": {
            "train_steps": 60,
            "steps_per_loop": 20,
            "summary_interval": 20,
            "checkpoint_interval": 60,
            "validation_interval": 60,
            "validation_steps": 4,
        },
    }


def test_tsv_pairs_are_tokenised_like_tfds_pairs(data):
    config = translation.TranslationDataConfig(
        tfds_name="",
        input_path=str(data / "dev.tsv"),
        vocab_file=str(data / "vocab.txt"),
        max_seq_length=16,
        global_batch_size=4,
        is_training=False,
        drop_remainder=False,
    )
    features, labels = next(iter(tr_task.TranslationTask(None).build_inputs(config)))
    source, target = _pairs(64, 1)[0]
    assert features["inputs"].numpy()[0].tolist()[: len(piece_ids(source)) + 1] == piece_ids(
        source
    ) + [3]
    assert labels.numpy()[0].tolist()[: len(piece_ids(target)) + 1] == piece_ids(target) + [3]


def test_bad_tsv_input_is_a_clear_error(data):
    (data / "bad.tsv").write_text("no tab on this line\n")
    base = dict(tfds_name="", vocab_file=str(data / "vocab.txt"), is_training=False)
    task = tr_task.TranslationTask(None)
    with pytest.raises(ValueError, match="No translation data matches input_path"):
        task.build_inputs(
            translation.TranslationDataConfig(input_path=str(data / "x*.tsv"), **base)
        )
    with pytest.raises(ValueError, match="`tfds_name`.*or `input_path`"):
        task.build_inputs(translation.TranslationDataConfig(**base))
    bad = task.build_inputs(
        translation.TranslationDataConfig(input_path=str(data / "bad.tsv"), **base)
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match="expected source<TAB>target lines"):
        next(iter(bad))


@pytest.mark.slow  # end to end, in the full run (docs/testing.md)
def test_trains_on_tsv_and_prunes_encoder_decoder_heads(data, tmp_path):
    model_dir = str(tmp_path / "model")
    run = train.run
    initial = run(
        "headsize_seq2seq/translation", model_dir, [TINY_WMT], _override(data), mode="eval"
    ).metrics["validation_loss"]
    result = run("headsize_seq2seq/translation", model_dir, [TINY_WMT], _override(data))
    assert result.metrics["validation_loss"] < initial - 0.5
    argv = [
        "prune",
        "--model_dir",
        model_dir,
        "--attention-kinds",
        "encoder_decoder",
        "--target-fraction",
        "0.25",
        # Both heads in one step (the default step of 10% takes two, each scoring the
        # heads and evaluating again); the schedule is tested in tests/pruning.
        "--step",
        "0.25",
        "--output",
        str(tmp_path / "pruned"),
    ]
    assert cli.main(argv) == 0
    params, _ = train.load_trained_model(str(tmp_path / "pruned"))
    assert params.task.train_data.input_path == str(data / "train.tsv")
