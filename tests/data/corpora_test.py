"""Corpus preparation: files, manifest checks, atomic writes, TFRecord format."""

import json
import os
import pathlib
import tempfile

import numpy as np
import pytest
import tensorflow as tf

from headsize_tf.data import corpora

WORDS = "the quick brown fox jumps over a lazy dog while emma reads letters to harriet".split()


def _books(seed=0):
    rng = np.random.default_rng(seed)
    books = {}
    for names in corpora.AUSTEN_BOOKS.values():
        for name in names:
            books[name] = [" ".join(rng.choice(WORDS, size=12)) + "." for _ in range(300)]
    return books


OPTIONS = corpora.PrepareOptions(vocab_size=200, seq_length=16, max_predictions_per_seq=3)


class CorporaTest(tf.test.TestCase):
    @pytest.fixture(autouse=True)
    def _data(self, austen_data_dir):
        self._austen = austen_data_dir

    def test_prepare_writes_checked_files(self):
        with tempfile.TemporaryDirectory() as tmp:
            root = corpora.prepare("austen", tmp, OPTIONS, raw=_books())
            manifest = corpora.load_manifest("austen", tmp)
            self.assertEqual(
                sorted(manifest["files"]),
                sorted(
                    ["vocab.txt"]
                    + [f"{s}.txt" for s in ("train", "valid", "test")]
                    + [
                        f"{k}_{s}.tfrecord"
                        for k in ("mlm", "lm")
                        for s in ("train", "valid", "test")
                    ]
                ),
            )
            self.assertEqual([p.name for p in pathlib.Path(tmp).iterdir()], ["austen"])
            vocab = (root / "vocab.txt").read_text().split()
            self.assertEqual(vocab[:5], corpora.RESERVED_TOKENS)
            self.assertIn("fox", vocab)
            record = next(iter(tf.data.TFRecordDataset(str(root / "mlm_train.tfrecord"))))
            example = tf.train.Example.FromString(record.numpy()).features.feature
            ids = list(example["input_ids"].int64_list.value)
            self.assertLen(ids, 16)
            self.assertEqual((ids[0], ids[-1]), (2, 3))  # [CLS] ... [SEP]
            positions = list(example["masked_lm_positions"].int64_list.value)
            labels = list(example["masked_lm_ids"].int64_list.value)
            weights = list(example["masked_lm_weights"].float_list.value)
            self.assertLen(positions, 3)
            self.assertEqual(weights, [1.0, 1.0, 0.0])  # round(14 * 0.15) = 2, padded to 3
            positions, labels = positions[:2], labels[:2]
            self.assertTrue(all(0 < p < 15 for p in positions))
            self.assertTrue(
                all(label not in (0, 2, 3, 4) and label < len(vocab) for label in labels)
            )
            stats = manifest["stats"]["splits"]
            self.assertEqual(stats["train"]["lines"], 4 * 300)
            lm = next(iter(tf.data.TFRecordDataset(str(root / "lm_test.tfrecord"))))
            lm_ids = tf.train.Example.FromString(lm.numpy()).features.feature["input_ids"]
            self.assertLen(lm_ids.int64_list.value, 17)

    def test_missing_corpus_names_fix_command(self):
        with tempfile.TemporaryDirectory() as tmp:
            with self.assertRaisesRegex(
                corpora.CorpusError,
                rf"MANIFEST.json does not exist. Run `headsize-tf data prepare austen --data-dir {tmp}`",
            ):
                corpora.load_manifest("austen", tmp)

    def test_corrupt_file_is_detected(self):
        with tempfile.TemporaryDirectory() as tmp:
            root = corpora.prepare("austen", tmp, OPTIONS, raw=_books())
            path = root / "mlm_train.tfrecord"
            path.write_bytes(path.read_bytes()[:-10])  # Half-written.
            with self.assertRaisesRegex(
                corpora.CorpusError, r"mlm_train.tfrecord is corrupt or half-written"
            ):
                corpora.load_manifest("austen", tmp)
            os.remove(path)
            with self.assertRaisesRegex(corpora.CorpusError, r"mlm_train.tfrecord is missing"):
                corpora.load_manifest("austen", tmp)
            # Preparing again repairs it.
            corpora.prepare("austen", tmp, OPTIONS, raw=_books())
            corpora.load_manifest("austen", tmp)

    def test_failed_prepare_leaves_nothing(self):
        with tempfile.TemporaryDirectory() as tmp:
            books = _books()
            del books["emma"]
            with self.assertRaisesRegex(corpora.CorpusError, r"lacks the books \['emma'\]"):
                corpora.prepare("austen", tmp, OPTIONS, raw=books)
            self.assertEqual(os.listdir(tmp), [])

    def test_unknown_corpus(self):
        with self.assertRaisesRegex(corpora.CorpusError, r"Unknown corpus 'lm1b'"):
            corpora.prepare("lm1b", "/nonexistent")

    def test_real_austen(self):
        # Fetched through Debian's package registry by the session fixture.
        data_dir = self._austen
        manifest = corpora.load_manifest("austen", data_dir)
        words = sum(s["words"] for s in manifest["stats"]["splits"].values())
        self.assertGreater(words, 700_000)  # Six novels, ~718k words.
        test_text = (pathlib.Path(manifest["root"]) / "test.txt").read_text()
        self.assertIn("Sir Walter Elliot", test_text)  # Persuasion's first line.
        self.assertGreater(manifest["stats"]["vocab_size"], 3000)
        json.dumps(manifest)


class RottenTomatoesTest(tf.test.TestCase):
    @pytest.fixture(autouse=True)
    def _tmp(self, tmp_path):
        self.tmp = tmp_path

    def test_prepare_from_rows(self):
        rng = np.random.default_rng(0)
        rows = [
            ("fresh" if i % 2 else "rotten", " ".join(rng.choice(WORDS, size=8)) + f" {i}")
            for i in range(400)
        ]
        options = corpora.PrepareOptions(vocab_size=150, seq_length=8)
        root = corpora.prepare("rotten_tomatoes", self.tmp, options, raw=rows)
        manifest = corpora.load_manifest("rotten_tomatoes", self.tmp)
        splits = manifest["stats"]["splits"]
        self.assertEqual(sum(s["examples"] for s in splits.values()), 400)
        self.assertBetween(splits["test"]["examples"], 20, 60)  # ~10%
        train_tsv = (root / "train.tsv").read_text().splitlines()
        self.assertLen(train_tsv, splits["train"]["examples"])
        dev_texts = {line.split("\t", 1)[1] for line in (root / "dev.tsv").read_text().splitlines()}
        self.assertFalse(dev_texts & {line.split("\t", 1)[1] for line in train_tsv})
        record = next(iter(tf.data.TFRecordDataset(str(root / "train.tfrecord"))))
        feature = tf.train.Example.FromString(record.numpy()).features.feature
        ids = list(feature["input_ids"].int64_list.value)
        self.assertLen(ids, 8)
        self.assertEqual((ids[0], ids[-1]), (2, 3))  # 8 words + [CLS]/[SEP] > 8: truncated
        self.assertEqual(list(feature["input_mask"].int64_list.value), [1] * 8)
        label = feature["label_ids"].int64_list.value[0]
        self.assertEqual(label, int(train_tsv[0].split("\t")[0]))


def test_tfrecord_features_are_written_in_key_order(tmp_path):
    """Protobuf's map order changes from process to process; the records' does not (a
    corpus prepared again matches its manifest's checksums)."""
    example = {
        "segment_ids": np.zeros(3, np.int64),
        "input_ids": np.arange(3),
        "masked_lm_weights": np.ones(2, np.float32),
    }
    corpora.write_tfrecord(tmp_path / "a.tfrecord", [example])
    (record,) = tf.data.TFRecordDataset(str(tmp_path / "a.tfrecord")).as_numpy_iterator()
    positions = [record.index(key.encode()) for key in sorted(example)]
    assert positions == sorted(positions)
    parsed = tf.train.Example.FromString(record).features.feature
    np.testing.assert_array_equal(parsed["input_ids"].int64_list.value, [0, 1, 2])


def test_corpora_of_other_options_get_a_folder_of_their_own(tmp_path, monkeypatch):
    assert corpora.data_dir_for(corpora.PrepareOptions(), tmp_path) == tmp_path
    assert corpora.data_dir_for(corpora.PrepareOptions(seq_length=256), tmp_path) == (
        tmp_path / "seq256"
    )
    assert corpora.data_dir_for(OPTIONS, tmp_path) == (
        tmp_path / "vocab200-seq16-max_predictions_per_seq3"
    )
    monkeypatch.setenv("HEADSIZE_TF_DATA_DIR", str(tmp_path / "env"))
    assert corpora.data_dir_for(corpora.PrepareOptions(seq_length=16)) == tmp_path / "env/seq16"
