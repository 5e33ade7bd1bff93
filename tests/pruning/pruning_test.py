"""Head gates, importance scores, iterative pruning and physical head removal."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from absl.testing import parameterized

from headsize_tf.layers import CollaborativeAttention, FixedHeadAttention, StandardAttention
from headsize_tf.modeling import HeadsizeBertEncoder
from headsize_tf.pruning import (
    head_importance,
    head_mask,
    iterative_pruning,
    remove_heads,
    select_heads_to_prune,
    set_head_mask,
)
from tests import clean_tf
from tests.layers import reference, util

KINDS = [
    ("standard", {}),
    ("fixed_head", {"head_size": 6}),
    ("collaborative", {"shared_key_dim": 12}),
]


def _encoder(kind, kwargs, seed=0):
    encoder = HeadsizeBertEncoder(
        vocab_size=50,
        hidden_size=16,
        num_layers=3,
        inner_dim=32,
        attention=dict(kind=kind, num_heads=4, **kwargs),
        output_dropout=0.0,
        attention_dropout=0.0,
    )
    encoder.build_weights()
    rng = np.random.default_rng(seed)
    for layer in encoder.attention_layers:  # Non-trivial attention everywhere.
        for v in layer.weights:
            if "gates" not in v.name:
                v.assign(rng.normal(size=v.shape, scale=0.3))
    return encoder


def _inputs(seed=0, batch=3, length=9):
    ids = np.random.default_rng(seed).integers(1, 50, size=(batch, length)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, 6:] = 0
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": 0 * ids}


MASK = np.array([[1, 0, 1, 1], [0, 0, 0, 0], [1, 1, 0, 0]], np.float32)


class GateTest(tf.test.TestCase):
    def test_collaborative_gate_zeroes_that_heads_context(self):
        rng = np.random.default_rng(1)
        x = rng.normal(size=(2, 5, 24)).astype(np.float32)
        w = util.random_collaborative_weights(rng, 24, 4, 8, 16)
        layer = CollaborativeAttention(num_heads=4, shared_key_dim=16, head_size=8)
        layer(x, x)
        util.set_collaborative_weights(layer, w)
        layer.set_head_mask([1.0, 0.0, 1.0, 1.0])
        expected, _ = reference.collaborative(x, x, w, head_size=8, gates=[1, 0, 1, 1])
        self.assertAllClose(layer(x, x), expected, atol=1e-5)

    def test_gates_cost_nothing_when_unused(self):
        layer = StandardAttention(num_heads=4)
        x = np.random.default_rng(0).normal(size=(2, 5, 16)).astype(np.float32)
        y = layer(x, x)
        self.assertAllEqual(layer.head_gates.numpy(), np.ones(4))
        self.assertFalse(layer.head_gates.trainable)
        self.assertNotIn(id(layer.head_gates), [id(w) for w in layer.trainable_weights])
        self.assertAllClose(layer(x, x), y)


class RemovalTest(tf.test.TestCase, parameterized.TestCase):
    @pytest.fixture(autouse=True)
    def _tmp(self, tmp_path):
        self.tmp = tmp_path

    @parameterized.named_parameters(*[(k, k, kw) for k, kw in KINDS])
    def test_removal_equals_masking(self, kind, kwargs):
        encoder = _encoder(kind, kwargs)
        inputs = _inputs()
        full = encoder(inputs)["sequence_output"].numpy()
        set_head_mask(encoder, MASK)
        masked = encoder(inputs)["sequence_output"].numpy()
        self.assertGreater(np.abs(masked - full).max(), 1e-3)  # The mask does something.
        pruned = remove_heads(encoder)
        self.assertAllClose(pruned(inputs)["sequence_output"], masked, atol=1e-5)
        self.assertEqual(pruned.get_config()["pruned_heads"], [[1], [0, 1, 2, 3], [2, 3]])
        self.assertLess(pruned.count_params(), encoder.count_params())
        self.assertAllEqual(head_mask(pruned), MASK)
        kept = [layer.num_heads for layer in pruned.attention_layers]
        self.assertEqual(kept, [3, 1, 2])  # Layer 1 keeps one placeholder head, gated off.

    @parameterized.named_parameters(*[(k, k, kw) for k, kw in KINDS])
    def test_pruned_encoder_restores_and_exports(self, kind, kwargs):
        encoder = _encoder(kind, kwargs)
        set_head_mask(encoder, MASK)
        pruned = remove_heads(encoder)
        inputs = _inputs(seed=2)
        expected = pruned(inputs)["sequence_output"].numpy()
        # Config + checkpoint.
        again = HeadsizeBertEncoder.from_config(pruned.get_config()).build_weights()
        path = tf.train.Checkpoint(encoder=pruned).write(str(self.tmp / "ckpt"))
        tf.train.Checkpoint(encoder=again).read(path).assert_existing_objects_matched()
        self.assertAllClose(again(inputs)["sequence_output"], expected, atol=1e-6)
        # SavedModel, served from a fresh process that imports only TensorFlow.
        spec = {k: tf.TensorSpec([None, None], tf.int32, name=k) for k in inputs}

        @tf.function(input_signature=[spec])
        def serve(features):
            return {"sequence_output": pruned(features)["sequence_output"]}

        module = tf.Module()
        module.encoder = pruned
        tf.saved_model.save(module, str(self.tmp / "sm"), signatures={"serving_default": serve})
        np.savez(self.tmp / "inputs.npz", **inputs)
        code = (
            "import sys, numpy as np, tensorflow as tf\n"
            f"m = tf.saved_model.load({str(self.tmp / 'sm')!r})\n"
            f"x = dict(np.load({str(self.tmp / 'inputs.npz')!r}))\n"
            "out = m.signatures['serving_default'](**{k: tf.constant(v) for k, v in x.items()})\n"
            f"np.save({str(self.tmp / 'served.npy')!r}, out['sequence_output'].numpy())\n"
            "assert 'headsize_tf' not in sys.modules and 'official' not in sys.modules\n"
        )
        clean_tf.run(code)
        self.assertAllClose(np.load(self.tmp / "served.npy"), expected, atol=1e-5)

    def test_pruning_a_pruned_encoder_again(self):
        encoder = _encoder("standard", {})
        set_head_mask(encoder, MASK)
        once = remove_heads(encoder)
        second = MASK.copy()
        second[0, 3] = 0
        set_head_mask(once, second)
        inputs = _inputs()
        masked = once(inputs)["sequence_output"].numpy()
        twice = remove_heads(once)
        self.assertEqual(twice.get_config()["pruned_heads"][0], [1, 3])
        self.assertAllClose(twice(inputs)["sequence_output"], masked, atol=1e-5)

    def test_bad_masks(self):
        encoder = _encoder("standard", {})
        with self.assertRaisesRegex(ValueError, r"shape \(3, 5\); expected \(3, 4\)"):
            set_head_mask(encoder, np.ones([3, 5]))
        with self.assertRaisesRegex(ValueError, r"shape \(2, 4\); expected \(3, 4\)"):
            remove_heads(encoder, np.ones([2, 4]))
        with self.assertRaisesRegex(ValueError, r"expected \[4\] \(one value per head\)"):
            encoder.attention_layers[0].set_head_mask([1.0, 0.0])
        set_head_mask(encoder, MASK)
        pruned = remove_heads(encoder)
        with self.assertRaisesRegex(ValueError, r"Layer 0: heads \[1\] were removed"):
            set_head_mask(pruned, np.ones([3, 4]))
        with self.assertRaisesRegex(ValueError, "pruned_heads has 2 entries"):
            HeadsizeBertEncoder(
                vocab_size=5,
                hidden_size=8,
                num_layers=3,
                attention=dict(num_heads=2),
                pruned_heads=[[0], [1]],
            )
        grouped = HeadsizeBertEncoder(
            vocab_size=5,
            hidden_size=8,
            num_layers=1,
            attention=dict(kind="grouped", num_heads=4, num_kv_heads=2),
        )
        with self.assertRaisesRegex(ValueError, r"not grouped ones .*whole key/value groups"):
            remove_heads(grouped, np.array([[1, 1, 0, 0]], np.float32))


class _GatedStack(tf_keras.Model):
    """Two float64 attention layers and a linear read-out (for finite differences)."""

    def __init__(self):
        super().__init__(dtype="float64")
        self.a = FixedHeadAttention(num_heads=3, head_size=4, dtype="float64")
        self.b = CollaborativeAttention(num_heads=3, shared_key_dim=6, head_size=4, dtype="float64")
        self.out = tf_keras.layers.Dense(2, dtype="float64")

    def call(self, x, training=False):
        h = x + self.a(x, x)
        h = h + self.b(h, h)
        return self.out(tf.reduce_mean(h, axis=1))


class ImportanceTest(tf.test.TestCase):
    def _setup(self):
        tf_keras.utils.set_random_seed(0)
        model = _GatedStack()
        rng = np.random.default_rng(0)
        x = rng.normal(size=(4, 5, 8))
        y = np.array([0, 1, 1, 0])
        model(x)
        loss = tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        return model, x, y, loss

    def test_importance_matches_finite_differences(self):
        model, x, y, loss = self._setup()
        scores = head_importance(model, [(x, y)], loss, normalize=False)
        layers = [model.a, model.b]
        eps = 1e-5
        for i, layer in enumerate(layers):
            for h in range(3):
                gates = np.ones(3)
                gates[h] = 1 + eps
                layer.set_head_mask(gates)
                plus = float(loss(y, model(x)))
                gates[h] = 1 - eps
                layer.set_head_mask(gates)
                minus = float(loss(y, model(x)))
                layer.set_head_mask(np.ones(3))
                numeric = abs(plus - minus) / (2 * eps) / (4 * 5)  # divided by tokens
                self.assertAllClose(scores[i, h], numeric, rtol=1e-3)

    def test_normalised_per_layer_and_deterministic(self):
        model, x, y, loss = self._setup()
        batches = [(x[:2], y[:2]), (x[2:], y[2:])]
        scores = head_importance(model, batches, loss)
        self.assertAllClose(np.linalg.norm(scores, axis=1), [1.0, 1.0])
        self.assertAllEqual(scores, head_importance(model, batches, loss))

    def test_empty_dataset(self):
        model, _, _, loss = self._setup()
        with self.assertRaisesRegex(ValueError, "no examples"):
            head_importance(model, [], loss)


class ScheduleTest(tf.test.TestCase):
    def test_least_important_first_with_min_per_layer(self):
        importance = np.array([[0.1, 0.2, 0.9], [0.05, 0.8, 0.7]])
        mask = np.ones([2, 3])
        self.assertEqual(select_heads_to_prune(importance, mask, 2), [(1, 0), (0, 0)])
        chosen = select_heads_to_prune(importance, mask, 4, min_heads_per_layer=1)
        self.assertEqual(chosen, [(1, 0), (0, 0), (0, 1), (1, 2)])
        with self.assertRaisesRegex(
            ValueError, "Cannot prune 5 more heads while keeping at least 1"
        ):
            select_heads_to_prune(importance, mask, 5, min_heads_per_layer=1)

    def test_curve_steps_and_recompute(self):
        calls = []

        def importance_fn(mask):
            calls.append(mask.copy())
            return np.arange(20, dtype=float).reshape(4, 5)

        steps = iterative_pruning(
            (4, 5),
            importance_fn,
            lambda m: float(m.sum()),
            target_fraction=0.5,
            step=0.1,
            progress=False,
        )
        self.assertEqual([s.fraction for s in steps], [0.0, 0.1, 0.2, 0.3, 0.4, 0.5])
        self.assertEqual([s.heads_pruned for s in steps], [0, 2, 4, 6, 8, 10])
        self.assertEqual([s.metric for s in steps], [20, 18, 16, 14, 12, 10])
        self.assertLen(calls, 5)  # Recomputed before each pruning step.
        self.assertEqual(np.asarray(steps[1].mask)[0, :2].tolist(), [0.0, 0.0])
        calls.clear()
        iterative_pruning(
            (4, 5),
            importance_fn,
            lambda m: 0.0,
            target_fraction=0.5,
            step=0.1,
            recompute=False,
            progress=False,
        )
        self.assertLen(calls, 1)

    def test_bad_fractions(self):
        for bad in (1.0, -0.1, 1.5):
            with self.assertRaisesRegex(
                ValueError, f"target_fraction must be a fraction in \\[0, 1\\); got {bad}"
            ):
                iterative_pruning((2, 2), None, None, target_fraction=bad)
        with self.assertRaisesRegex(ValueError, r"step must be a fraction in \(0, 1\); got 0"):
            iterative_pruning((2, 2), None, None, step=0)
        with self.assertRaisesRegex(ValueError, "min_heads_per_layer=1 keeps 4"):
            iterative_pruning((4, 2), None, None, target_fraction=0.75, min_heads_per_layer=1)


@pytest.mark.parametrize(
    "attention",
    [
        dict(kind="grouped", num_heads=4, num_kv_heads=2),
        dict(kind="latent", num_heads=4, kv_latent_dim=8),
    ],
)
def test_an_encoder_with_pruned_heads_of_shared_keys_and_values_is_refused(attention):
    """Kept heads of these kinds would change size or regroup (the pruned_heads rebuild keeps
    standard, fixed and collaborative heads' sizes only)."""
    with pytest.raises(ValueError, match=rf"not {attention['kind']} \(shared keys and values\)"):
        HeadsizeBertEncoder(
            vocab_size=5,
            hidden_size=32,
            num_layers=1,
            attention=attention,
            pruned_heads=[[1, 3]],
        )
