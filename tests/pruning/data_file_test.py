"""`headsize-tf prune` on any labelled text task: a CSV / TSV / JSONL file or TFDS GLUE.

Sentence pairs become `[CLS] a [SEP] b [SEP]` with segment ids 0/1; the label
map is saved with the pruned model. A tiny random BERT (tests.pretrained)
covers pairs and TFDS mock data; MiniLM runs the documented command on a CSV.
"""

import itertools
import json

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from headsize_tf import cli
from headsize_tf.data.text_tasks import TextTaskError, load_text_file
from headsize_tf.pretrained import load_sentence_encoder
from headsize_tf.pruning import head_mask, prune
from headsize_tf.training import finetune as ft
from tests.hf_fixtures import write_checkpoint

# Ids in tests.hf_fixtures.VOCAB.
CLS, SEP, THE, CAT, SAT, ON, MAT, DOT, S, A, DOG = 2, 3, 5, 6, 7, 8, 9, 10, 11, 12, 13
# Words of TFDS mock text (letters a-j), for a tiny model on mock GLUE.
LETTERS = list("abcdefghij")
LETTER_VOCAB = (
    ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + LETTERS + [f"##{c}" for c in LETTERS]
)
WORDS = ["the", "cat", "sat", "on", "a", "mat", "dog", "dogs", "cats"]


def _bert_truncation(len_a: int, len_b: int, budget: int) -> tuple[int, int]:
    """BERT's `_truncate_seq_pair`, one piece at a time."""
    while len_a + len_b > budget:
        if len_a > len_b:
            len_a -= 1
        else:
            len_b -= 1
    return len_a, len_b


def _pair_csv(path, n: int = 80, seed: int = 0):
    """Sentence pairs of the tiny vocabulary; the label says whether both mention a dog."""
    rng = np.random.default_rng(seed)
    rows = ["premise,hypothesis,gold"]
    for _ in range(n):
        a, b = (" ".join(rng.choice(WORDS, size=rng.integers(1, 8))) for _ in range(2))
        gold = {0: "neither", 1: "one", 2: "both"}[("dog" in a) + ("dog" in b)]
        rows.append(f"{a},{b},{gold}")
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory):
    """The tiny random BERT of tests.hf_fixtures, loaded once (the tests only read it)."""
    path = tmp_path_factory.mktemp("bert")
    write_checkpoint(path)
    return load_sentence_encoder(checkpoint=path)


class PairInputTest(tf.test.TestCase):
    @pytest.fixture(autouse=True)
    def _encoder(self, tiny_encoder):
        self.encoder = tiny_encoder

    def test_truncation_matches_bert(self):
        for len_a, len_b, budget in itertools.product(range(13), range(13), range(16)):
            self.assertEqual(
                ft.truncate_pair_lengths(len_a, len_b, budget),
                _bert_truncation(len_a, len_b, budget),
                (len_a, len_b, budget),
            )

    def test_pairs_are_cls_a_sep_b_sep_with_segments(self):
        pairs = [("the cat", "sat on a mat."), ("dogs", ""), ("", "")]
        ids = ft.tokenize_all(self.encoder, pairs, 64)
        self.assertAllEqual(
            ids[0],
            [
                [CLS, 0],
                [THE, 0],
                [CAT, 0],
                [SEP, 0],
                [SAT, 1],
                [ON, 1],
                [A, 1],
                [MAT, 1],
                [DOT, 1],
                [SEP, 1],
            ],
        )
        self.assertAllEqual(ids[1], [[CLS, 0], [DOG, 0], [S, 0], [SEP, 0], [SEP, 1]])
        self.assertAllEqual(ids[2], [[CLS, 0], [SEP, 0], [SEP, 1]])
        # Single texts are unchanged: [CLS] text [SEP] ids.
        self.assertAllEqual(ft.tokenize_all(self.encoder, ["the cat"], 64)[0], [CLS, THE, CAT, SEP])

    def test_longer_side_is_truncated_first(self):
        long = "the cat sat on a mat ."  # 7 pieces
        ids = ft.tokenize_all(self.encoder, [(long, "dogs"), ("dogs", long), (long, long)], 8)
        self.assertAllEqual(ids[0][:, 0], [CLS, THE, CAT, SAT, SEP, DOG, S, SEP])
        self.assertAllEqual(ids[1][:, 0], [CLS, DOG, S, SEP, THE, CAT, SAT, SEP])
        self.assertAllEqual(ids[2][:, 0], [CLS, THE, CAT, SAT, SEP, THE, CAT, SEP])
        self.assertAllEqual(ids[2][:, 1], [0] * 5 + [1] * 3)  # 3 + 2 pieces kept of 7 + 7
        # Capped at the encoder's 24 positions, whatever max_seq_length says.
        many = " ".join(["cat"] * 30)
        self.assertLen(ft.tokenize_all(self.encoder, [(many, many)], 512)[0], 24)
        with self.assertRaisesRegex(ValueError, "max_seq_length >= 3"):
            ft.tokenize_all(self.encoder, [("a", "b")], 2)
        with self.assertRaisesRegex(ValueError, "all strings or all"):
            ft.tokenize_all(self.encoder, [("a", "b"), "c"], 8)

    def test_segment_ids_reach_the_encoder(self):
        ids = ft.tokenize_all(self.encoder, [("the cat", "a dog"), ("sat", "on a mat .")], 64)
        ids.append(ft.tokenize_all(self.encoder, ["the mat"], 64)[0])
        batch = ft.pad_batch(ids, np.arange(3))
        self.assertAllEqual(
            batch["input_type_ids"],
            [[0, 0, 0, 0, 1, 1, 1, 0], [0, 0, 0, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0, 0, 0]],
        )
        self.assertAllEqual(batch["input_mask"].sum(axis=1), [7, 8, 4])
        model = ft.SentenceClassifier(self.encoder, 3, dropout=0.0)
        logits = model(batch).numpy()
        flat = dict(batch, input_type_ids=np.zeros_like(batch["input_type_ids"]))
        self.assertGreater(np.abs(model(flat).numpy()[:2] - logits[:2]).max(), 1e-4)
        self.assertAllClose(model(flat).numpy()[2], logits[2])
        # Padding does not change a pair's logits.
        alone = model(ft.pad_batch(ids, np.array([0]))).numpy()
        self.assertAllClose(alone[0], logits[0], atol=1e-5)


class PruneDataFileTest(tf.test.TestCase):
    @pytest.fixture(autouse=True)
    def _env(self, tmp_path, capsys):
        self.tmp = tmp_path
        self.capsys = capsys
        write_checkpoint(tmp_path / "bert")

    @pytest.mark.slow  # end to end, in the full run (docs/testing.md)
    def test_sentence_pairs_from_a_csv(self):
        data = _pair_csv(self.tmp / "pairs.csv")
        out = self.tmp / "pruned"
        columns = dict(
            data_file=data,
            text_column="premise",
            text_pair_column="hypothesis",
            label_column="gold",
        )
        report = prune.prune_task(
            out,
            checkpoint=self.tmp / "bert",
            target_fraction=0.5,
            step=0.25,
            finetune_epochs=1.0,
            importance_examples=32,
            **columns,
        )
        label_map = {"both": 0, "neither": 1, "one": 2}
        self.assertEqual(report["label_map"], label_map)
        self.assertEqual(json.loads((out / "label_map.json").read_text()), label_map)
        self.assertEqual(prune.load_label_map(out), label_map)
        info = report["data_info"]
        self.assertEqual(info["text_columns"], ["premise", "hypothesis"])
        self.assertEqual(info["train_examples"] + info["dev_examples"], 80)
        self.assertEqual(report["data"], str(data))
        self.assertEqual([p["fraction"] for p in report["curve"]], [0.0, 0.25, 0.5])
        self.assertAllClose(report["accuracy"]["pruned"], report["accuracy"]["masked"], atol=1e-9)
        model = prune.load_classifier(out)
        self.assertEqual(model.head.units, 3)
        self.assertEqual(int((head_mask(model.encoder) == 0).sum()), 4)
        task = load_text_file(data, "premise", "gold", text_pair_column="hypothesis")
        ids = ft.tokenize_all(model.sentence_encoder, task.dev_texts, 64)
        self.assertAllClose(ft.accuracy(model, ids, task.dev_labels), report["accuracy"]["pruned"])
        # A pruned checkpoint's head is reused only for the same labels.
        other = self.tmp / "other.csv"
        other.write_text(data.read_text().replace(",neither\n", ",none\n"))
        with self.assertRaisesRegex(TextTaskError, r"trained with the labels .*'neither'"):
            prune.prune_task(self.tmp / "x", checkpoint=out, **dict(columns, data_file=other))
        two = self.tmp / "two.csv"
        two.write_text(data.read_text().replace(",one\n", ",both\n"))
        with self.assertRaisesRegex(TextTaskError, "head of 3 classes; .* has 2 labels"):
            prune.prune_task(self.tmp / "x", checkpoint=out, **dict(columns, data_file=two))
        self.assertFalse((self.tmp / "x").exists())

    def test_conflicting_sources(self):
        for kwargs, fragment in (
            (
                dict(task="sentiment", data_file="f.csv"),
                "one data source; got task= and data_file=",
            ),
            (dict(tfds="glue/sst2", data_file="f.csv"), "got data_file= and tfds="),
            (dict(text_column="t"), "text_column= only apply to data_file="),
            (dict(tfds="glue/sst2", split_column="s"), "split_column= only apply"),
        ):
            with self.assertRaisesRegex(TextTaskError, fragment):
                prune.prune_task(self.tmp / "out", checkpoint=self.tmp / "bert", **kwargs)

    @pytest.mark.slow  # end to end, in the full run (docs/testing.md)
    def test_tfds_glue_on_mock_data(self):
        # A tiny BERT whose vocabulary holds mock GLUE's letters a-j.
        (self.tmp / "bert" / "vocab.txt").write_text("\n".join(LETTER_VOCAB) + "\n")
        for name, labels in (
            ("glue/sst2", {"negative": 0, "positive": 1}),
            ("glue/mnli", {"entailment": 0, "neutral": 1, "contradiction": 2}),
        ):
            out = self.tmp / name.replace("/", "_")
            argv = [
                "prune",
                "--checkpoint",
                str(self.tmp / "bert"),
                "--tfds",
                name,
                "--data-dir",
                str(self.tmp / "tfds"),
                "--target-fraction",
                "0.5",
                "--step",
                "0.5",
                "--finetune-epochs",
                "0.5",
                "--importance-examples",
                "32",
                "--output",
                str(out),
            ]
            with tfds.testing.mock_data(num_examples=48, policy=tfds.testing.MockPolicy.USE_CODE):
                self.assertEqual(cli.main(argv), 0)
            report = json.loads((out / "report.json").read_text())
            self.assertEqual(report["label_map"], labels)
            self.assertEqual(report["data"], f"tfds:{name}")
            self.assertEqual(report["data_info"]["dev_examples"], 48)
            self.assertEqual(prune.load_classifier(out).head.units, len(labels))
            self.assertIn(f"data: tfds:{name}: 48 train / 48 dev", self.capsys.readouterr().out)


@pytest.fixture
def minilm_cache(minilm_dir, monkeypatch):
    monkeypatch.setenv("HEADSIZE_TF_CACHE_DIR", str(minilm_dir.parent))


GOOD = [
    "a wonderful film",
    "I loved every minute",
    "great acting and a fine story",
    "a delight from start to finish",
    "beautiful and moving",
    "the best film this year",
    "funny, warm and clever",
    "a joy to watch",
]
BAD = [
    "a boring mess",
    "I hated every minute",
    "dull acting and a thin story",
    "a chore from start to finish",
    "ugly and tedious",
    "the worst film this year",
    "flat, cold and stupid",
    "a pain to watch",
]


# The documented command on MiniLM (about 45 s): in the full run; the tiny BERT above runs
# the same command on files and TFDS in the default run.
@pytest.mark.slow
def test_prune_command_on_a_csv_with_minilm(minilm_cache, tmp_path, capsys):
    """`headsize-tf prune --model minilm-l6 --data-file F.csv --text-column text
    --label-column label --target-fraction 0.3 --output DIR`, as docs/pruning.md shows it."""
    rows = ["id,text,label"]
    for i in range(6):
        rows += [f'{i}a{j},"{t} ({i})",positive' for j, t in enumerate(GOOD)]
        rows += [f'{i}b{j},"{t} ({i})",negative' for j, t in enumerate(BAD)]
    data = tmp_path / "F.csv"
    data.write_text("\n".join(rows) + "\n")
    out = tmp_path / "DIR"
    argv = [
        "prune",
        "--model",
        "minilm-l6",
        "--data-file",
        str(data),
        "--text-column",
        "text",
        "--label-column",
        "label",
        "--target-fraction",
        "0.3",
        "--output",
        str(out),
        "--finetune-epochs",
        "0.25",  # One step of 32 examples.
        "--importance-examples",
        "16",
        "--step",
        "0.3",
        "--no-recompute",
    ]
    assert cli.main(argv) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["label_map"] == {"negative": 0, "positive": 1}
    assert json.loads((out / "label_map.json").read_text()) == report["label_map"]
    assert report["data_info"]["train_examples"] + report["data_info"]["dev_examples"] == 96
    assert report["curve"][-1]["fraction"] == pytest.approx(0.3, abs=0.02)
    assert report["params"]["pruned"] < report["params"]["original"]
    assert report["accuracy"]["pruned"] == pytest.approx(report["accuracy"]["masked"], abs=1e-9)
    assert "labels {'negative': 0, 'positive': 1}" in capsys.readouterr().out
    # Predictions map back to the labels through the saved label map.
    model = prune.load_classifier(out)
    names = {i: name for name, i in prune.load_label_map(out).items()}
    ids = ft.tokenize_all(model.sentence_encoder, ["a wonderful film", "a boring mess"], 64)
    predicted = [names[int(i)] for i in np.argmax(ft.predict_logits(model, ids), axis=-1)]
    assert set(predicted) <= {"negative", "positive"}
