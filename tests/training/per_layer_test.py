"""Per-layer head counts and head sizes as ordinary config values.

A causal LM config with different heads and head sizes in each layer, given as
YAML, trains through `train.run`, is written back to the model_dir's
`params.yaml` as lists, reloads, counts its parameters as the formula does,
and exports to a SavedModel that scores text as the reloaded model does.
"""

import pathlib

import numpy as np
import pytest
import tensorflow as tf
import yaml

from headsize_tf import cli, params, serving
from headsize_tf.serving.export import language_model_outputs
from headsize_tf.training import train

ROOT = pathlib.Path(__file__).resolve().parents[2]
TINY_LM = str(ROOT / "official_configs" / "headsize_lm_austen_tiny.yaml")
PER_LAYER = """
task:
  model:
    num_layers: 3
    attention:
      kind: fixed_head
      num_heads: [1, 4, 2]
      head_size: [32, 8, 16]
trainer:
  train_steps: 4
  validation_steps: 1
  steps_per_loop: 2
  summary_interval: 2
  checkpoint_interval: 4
  validation_interval: 4
"""


class PerLayerTest(tf.test.TestCase):
    @pytest.fixture(autouse=True)
    def _env(self, austen_data_dir, tmp_path):
        self.data_dir = str(austen_data_dir)
        self.tmp = tmp_path

    @pytest.mark.slow  # end to end, in the full run (docs/testing.md)
    def test_per_layer_lm_trains_round_trips_and_exports(self):
        config = self.tmp / "per_layer.yaml"
        config.write_text(PER_LAYER)
        model_dir = str(self.tmp / "lm")
        result = train.run(
            "headsize_lm/language_modeling",
            model_dir,
            [TINY_LM, str(config)],
            data_dir=self.data_dir,
        )
        self.assertTrue(np.isfinite(result.metrics["validation_loss"]))
        self.assertTrue(tf.train.latest_checkpoint(model_dir).endswith("ckpt-4"))

        # YAML: the model_dir's params.yaml keeps the lists.
        written = yaml.safe_load((pathlib.Path(model_dir) / "params.yaml").read_text())
        attention = written["task"]["model"]["attention"]
        self.assertEqual((attention["num_heads"], attention["head_size"]), ([1, 4, 2], [32, 8, 16]))

        # The reloaded model has those heads, and the formula counts its parameters.
        _, lm = train.load_trained_model(model_dir)
        self.assertEqual(
            [(a.num_heads, a.head_size) for a in lm.attention_layers], [(1, 32), (4, 8), (2, 16)]
        )
        model = written["task"]["model"]
        spec = params.EncoderSpec(
            vocab_size=model["vocab_size"],
            width=model["hidden_size"],
            num_layers=3,
            attention=attention,
            intermediate_size=model["intermediate_size"],
            max_sequence_length=model["max_sequence_length"],
        )
        self.assertEqual(params.causal_lm_params(spec).trainable, lm.count_params())

        # SavedModel: the export scores text as the reloaded model does.
        self.assertEqual(
            cli.main(
                [
                    "export",
                    "--model_dir",
                    model_dir,
                    "--task",
                    "lm",
                    "--output",
                    str(self.tmp / "export"),
                ]
            ),
            0,
        )
        tokenizer, lm = serving.experiment_language_model(model_dir)
        texts = ["It is a truth universally acknowledged.", "Emma Woodhouse, handsome!"]
        inputs = tokenizer.tokenize(tf.constant(texts), add_special_tokens=False)
        want = language_model_outputs(lm, inputs)["log_likelihood"].numpy()
        loaded = tf.saved_model.load(str(self.tmp / "export" / "1"))
        got = loaded.signatures["serving_default"](text=tf.constant(texts))["log_likelihood"]
        self.assertAllClose(got.numpy(), want, rtol=1e-5, atol=1e-4)
