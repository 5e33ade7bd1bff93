"""Theorem 1 of Bhojanapalli et al. (2020): construction and the d < n bottleneck."""

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

from headsize_tf import theory
from headsize_tf.theory.theorem1 import column_softmax


class Theorem1Test(tf.test.TestCase, parameterized.TestCase):
    @parameterized.parameters((1, 1), (2, 2), (5, 3), (8, 8), (16, 9), (32, 32), (40, 17))
    def test_construction_reproduces_any_p_when_d_at_least_n(self, d, n):
        for seed in range(5):
            rng = np.random.default_rng(seed)
            x = rng.normal(size=(d, n))
            p = theory.random_stochastic(n, rng, concentration=rng.uniform(0.2, 3.0))
            w_q, w_k = theory.construct_heads(x, p)
            self.assertEqual(w_q.shape, (d, d))
            self.assertAllClose(theory.attention_matrix(x, w_q, w_k), p, atol=1e-5, rtol=0)

    def test_counterexample_below_n_is_not_representable(self):
        n, d = 8, 4
        p = column_softmax(4.0 * np.eye(n))  # Each token attends mostly to itself.
        self.assertEqual(theory.required_head_size(p), n - 1)
        with self.assertRaisesRegex(ValueError, "needs head size d >= n; got d=4 < n=8"):
            theory.construct_heads(np.random.default_rng(0).normal(size=(d, n)), p)
        # Any head of size d: logits of rank <= d, so C log P_hat has rank <= d < n - 1.
        rng = np.random.default_rng(1)
        for _ in range(20):
            x = rng.normal(size=(d, n))
            p_hat = theory.attention_matrix(x, rng.normal(size=(d, d)), rng.normal(size=(d, d)))
            self.assertLessEqual(theory.required_head_size(p_hat, tol=1e-6), d)
        # And gradient descent with d_p = 4 cannot get close, while d_p = n can.
        x = np.random.default_rng(1).normal(size=(n, n))
        small = theory.fit_attention(x, p, head_size=2, steps=1500, learning_rate=0.1)
        full = theory.fit_attention(x, p, head_size=n, steps=1500, learning_rate=0.1)
        self.assertGreater(small, 0.1)
        self.assertLess(full, 1e-3)

    def test_bad_inputs(self):
        rng = np.random.default_rng(0)
        x = rng.normal(size=(4, 3))
        with self.assertRaisesRegex(ValueError, "must be n x n = 3 x 3"):
            theory.construct_heads(x, np.full((4, 4), 0.25))
        with self.assertRaisesRegex(ValueError, "column-stochastic"):
            theory.construct_heads(x, np.full((3, 3), 0.5))
        with self.assertRaisesRegex(ValueError, "strictly positive"):
            theory.construct_heads(x, np.eye(3))
        with self.assertRaisesRegex(ValueError, "full column rank"):
            theory.construct_heads(np.ones((4, 3)), np.full((3, 3), 1 / 3))
