"""`headsize-tf train` on real text: loss falls, overrides switch layers, bad input."""

import functools
import os
import pathlib
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
from absl.testing import parameterized

from headsize_tf import params as hs_params
from headsize_tf.configs import encoders as hs_encoders
from headsize_tf.layers import CollaborativeAttention, FixedHeadAttention, StandardAttention
from headsize_tf.training import train

ROOT = pathlib.Path(__file__).resolve().parents[2]
TINY = str(ROOT / "official_configs" / "headsize_bert_pretraining_tiny.yaml")
TINY_LM = str(ROOT / "official_configs" / "headsize_lm_austen_tiny.yaml")
# 80 steps of 8 sequences: past the unigram plateau (~2 nats under the untrained
# loss for every attention kind) at a quarter of the compute of full batches.
FAST = (
    "trainer.train_steps=80,trainer.validation_steps=4,trainer.steps_per_loop=40,"
    "trainer.summary_interval=40,trainer.checkpoint_interval=80,trainer.validation_interval=80,"
    "task.train_data.global_batch_size=8"
)
TYPES = [
    ("standard", "", StandardAttention),
    (
        "fixed_head",
        "task.model.encoder.any.attention.kind=fixed_head,task.model.encoder.any.attention.head_size=32",
        FixedHeadAttention,
    ),
    (
        "collaborative",
        "task.model.encoder.any.attention.kind=collaborative,"
        "task.model.encoder.any.attention.shared_key_dim=32",
        CollaborativeAttention,
    ),
]


class TrainTest(tf.test.TestCase, parameterized.TestCase):
    @pytest.fixture(autouse=True)
    def _data(self, austen_data_dir, tmp_path):
        self.data_dir = str(austen_data_dir)
        self.tmp = tmp_path

    def _scratch_dir(self) -> str:
        import tempfile

        return tempfile.mkdtemp(dir=self.tmp)

    @parameterized.named_parameters(*TYPES)
    def test_pretraining_loss_falls_on_austen(self, override, cls):
        model_dir = self._scratch_dir()
        override = ",".join(x for x in (FAST, override) if x)
        initial = train.run(
            "headsize_bert/pretraining",
            model_dir,
            [TINY],
            override,
            mode="eval",
            data_dir=self.data_dir,
        ).metrics["validation_loss"]
        self.assertGreater(initial, 7.5)  # ~ ln(vocab) for an untrained model.
        result = train.run(
            "headsize_bert/pretraining",
            model_dir,
            [TINY],
            override,
            mode="train_and_eval",
            data_dir=self.data_dir,
        )
        final = result.metrics["validation_loss"]
        self.assertLess(final, initial - 1.0)
        self.assertTrue(tf.train.latest_checkpoint(model_dir).endswith("ckpt-80"))

        from official.core import task_factory

        task = task_factory.get_task(result.params.task)
        model = task.build_model()
        model(model.inputs)
        layers = model.encoder_network.attention_layers
        self.assertTrue(all(isinstance(layer, cls) for layer in layers))
        spec = hs_encoders.to_spec(result.params.task.model.encoder.any)
        count = hs_params.encoder_params(spec)
        self.assertEqual(model.encoder_network.count_params(), count.total)

    @parameterized.named_parameters(
        ("standard", "", StandardAttention),
        (
            "fixed_head",
            "task.model.attention.kind=fixed_head,task.model.attention.head_size=32",
            FixedHeadAttention,
        ),
        (
            "collaborative",
            "task.model.attention.kind=collaborative,task.model.attention.shared_key_dim=32",
            CollaborativeAttention,
        ),
    )
    def test_language_model_loss_falls_on_austen(self, override, cls):
        model_dir = self._scratch_dir()
        override = ",".join(x for x in (FAST, override) if x)
        run = functools.partial(
            train.run,
            "headsize_lm/language_modeling",
            model_dir,
            [TINY_LM],
            override,
            data_dir=self.data_dir,
        )
        initial = run(mode="eval").metrics
        self.assertGreater(initial["validation_loss"], 7.5)  # ~ ln(4096) untrained
        result = run(mode="train_and_eval")
        final = result.metrics
        self.assertLess(final["validation_loss"], initial["validation_loss"] - 1.5)
        self.assertAllClose(final["perplexity"], np.exp(final["validation_loss"]), rtol=0.05)

        from official.core import task_factory

        from headsize_tf.configs import language_modeling

        model = task_factory.get_task(result.params.task).build_model()
        self.assertTrue(all(isinstance(layer, cls) for layer in model.attention_layers))
        count = hs_params.causal_lm_params(language_modeling.to_spec(result.params.task.model))
        self.assertEqual(model.count_params(), count.total)

    def _assert_config_error(self, pattern, **kwargs):
        model_dir = os.path.join(self._scratch_dir(), "run")
        args = dict(
            experiment="headsize_bert/pretraining",
            model_dir=model_dir,
            config_files=[TINY],
            data_dir=self.data_dir,
        )
        args.update(kwargs)
        with self.assertRaisesRegex(train.ConfigError, pattern):
            train.run(**args)
        self.assertFalse(os.path.exists(model_dir), "nothing may be written on bad input")

    def test_unknown_experiment(self):
        self._assert_config_error(
            r"Unknown experiment 'headsize_bert/pretrain'", experiment="headsize_bert/pretrain"
        )

    def test_unknown_attention_type(self):
        self._assert_config_error(
            r"Unknown attention kind 'fixed'",
            params_override="task.model.encoder.any.attention.kind=fixed",
        )

    def test_bad_head_size(self):
        self._assert_config_error(
            r"`head_size` must be a positive int or \"sequence_length\"; got 'seq'",
            params_override="task.model.encoder.any.attention.kind=fixed_head,"
            "task.model.encoder.any.attention.head_size=seq",
        )

    def test_yaml_typo(self):
        bad = pathlib.Path(self._scratch_dir()) / "typo.yaml"
        bad.write_text("task:\n  model:\n    encoder:\n      any:\n        num_attention_head: 4\n")
        self._assert_config_error(r"typo.yaml.*num_attention_head", config_files=[TINY, str(bad)])

    def test_missing_data_dir(self):
        missing = os.path.join(self._scratch_dir(), "nowhere")
        self._assert_config_error(
            rf"does not exist. Run `headsize-tf data prepare austen --data-dir {missing}`",
            data_dir=missing,
        )

    def test_tpu_fails_fast_on_cpu(self):
        start = time.time()
        with self.assertRaisesRegex(RuntimeError, r"No TPU"):
            train.make_strategy("tpu", tpu="grpc://127.0.0.1:1", tpu_timeout=2.0)
        self.assertLess(time.time() - start, 10.0)

    def _cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "headsize_tf", "train", *args],
            capture_output=True,
            text=True,
            timeout=600,
        )

    def test_cli_reports_bad_input(self):
        result = self._cli(
            "--experiment", "nope", "--model_dir", os.path.join(self._scratch_dir(), "m")
        )
        self.assertEqual(result.returncode, 2)
        self.assertIn("Unknown experiment 'nope'", result.stderr)

    def test_mirrored_over_two_logical_cpus(self):
        model_dir = os.path.join(self._scratch_dir(), "mirrored")
        short = (
            "trainer.train_steps=40,trainer.validation_steps=2,trainer.steps_per_loop=20,"
            "trainer.summary_interval=20,trainer.checkpoint_interval=40,"
            "trainer.validation_interval=40,task.train_data.global_batch_size=8"
        )
        result = self._cli(
            "--experiment",
            "headsize_bert/pretraining",
            "--config_file",
            TINY,
            "--model_dir",
            model_dir,
            "--data-dir",
            self.data_dir,
            "--strategy",
            "mirrored",
            "--cpu-devices",
            "2",
            "--params_override",
            short,
        )
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        lines = dict(line.split(": ", 1) for line in result.stdout.splitlines() if ": " in line)
        self.assertEqual(lines["replicas"], "2")
        self.assertLess(float(lines["validation_loss"]), 7.5)  # untrained: ~ln(4096) = 8.3
        self.assertTrue(tf.train.latest_checkpoint(model_dir).endswith("ckpt-40"))
