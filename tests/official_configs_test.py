"""The papers' full-scale configs: generated, parseable, and sized as the papers say."""

import importlib.util
import pathlib
import re
import sys

import pytest
import tensorflow as tf
from absl.testing import parameterized

from headsize_tf import params as hs_params
from headsize_tf.configs import encoders as hs_encoders
from headsize_tf.configs import language_modeling
from headsize_tf.training import train

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "official_configs"
FAMILY_FILES = sorted(CONFIGS.glob("*/*.yaml"))


def _build_configs():
    spec = importlib.util.spec_from_file_location("build_configs", CONFIGS / "build_configs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["build_configs"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def experiment_of(path: pathlib.Path) -> str:
    return re.search(r"--experiment (\S+)", path.read_text()).group(1)


class OfficialConfigsTest(tf.test.TestCase, parameterized.TestCase):
    @pytest.fixture(autouse=True)
    def _data_dir(self, tmp_path):
        self.data_dir = tmp_path
        vocab = "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"])
        for corpus in ("lm1b", "wmt14"):
            (tmp_path / corpus).mkdir()
            (tmp_path / corpus / "vocab.txt").write_text(vocab)
        (tmp_path / "bert_pretrain").mkdir()
        for split in ("train", "valid"):
            (tmp_path / "bert_pretrain" / f"{split}-00000.tfrecord").write_bytes(b"")

    def test_committed_files_are_the_generated_ones(self):
        self.assertEqual(_build_configs().main(["--check"]), 0)
        self.assertLen(FAMILY_FILES, 10 + 7 + 6)

    @parameterized.named_parameters(*[(f"{p.parent.name}_{p.stem}", p) for p in FAMILY_FILES])
    def test_parses_with_its_experiment(self, path):
        params = train.build_params(experiment_of(path), [str(path)], data_dir=str(self.data_dir))
        self.assertGreater(params.trainer.train_steps, 0)

    def _lm_count(self, name: str) -> int:
        path = CONFIGS / "bhojanapalli_lm1b" / f"{name}.yaml"
        model = train.build_params(experiment_of(path), [str(path)], data_dir=str(self.data_dir))
        return hs_params.causal_lm_params(language_modeling.to_spec(model.task.model)).trainable

    def test_lm1b_fixed_heads_match_the_baselines(self):
        pairs = {
            path.stem: path for path in FAMILY_FILES if path.parent.name == "bhojanapalli_lm1b"
        }
        fixed = sorted(n for n in pairs if n.startswith("fixed32"))
        self.assertEqual(
            fixed, ["fixed32_w256_h122", "fixed32_w256_h32", "fixed32_w256_h59", "fixed32_w256_h89"]
        )
        for width, name in zip(
            (320, 384, 448, 512),
            sorted(fixed, key=lambda n: int(n.rsplit("_h", 1)[1])),
            strict=True,
        ):
            base, ours = self._lm_count(f"baseline_w{width}"), self._lm_count(name)
            self.assertLess(abs(ours - base) / base, 0.005, (name, ours, base))

    def test_bert24_shapes(self):
        path = CONFIGS / "bhojanapalli_bert24" / "fixed128_w512_h16.yaml"
        enc = train.build_params(experiment_of(path), [str(path)], data_dir=str(self.data_dir))
        enc = enc.task.model.encoder.any
        self.assertEqual(
            (enc.num_layers, enc.hidden_size, enc.attention.kind, enc.attention.head_size),
            (24, 512, "fixed_head", 128),
        )
        large = CONFIGS / "bhojanapalli_bert24" / "baseline_w1024_h16.yaml"
        large = train.build_params(experiment_of(large), [str(large)], data_dir=str(self.data_dir))
        count = hs_params.encoder_params(hs_encoders.to_spec(large.task.model.encoder.any))
        self.assertBetween(count.trainable, 330e6, 340e6)  # BERT-large: 335M

    def test_nmt_collaborative_key_dims(self):
        dims = {}
        for path in FAMILY_FILES:
            if path.parent.name == "cordonnier_nmt" and path.stem != "tiny":
                model = train.build_params(
                    experiment_of(path), [str(path)], data_dir=str(self.data_dir)
                ).task.model
                dims[path.stem] = (model.attention.kind, model.attention.shared_key_dim)
        self.assertEqual(
            dims,
            {
                "standard": ("standard", None),
                **{f"collaborative_dk{d}": ("collaborative", d) for d in (512, 256, 128, 64)},
            },
        )
