"""The CP decomposition of stacked per-head query-key products."""

import numpy as np
import tensorflow as tf
import tensorly as tl
from absl.testing import parameterized

from headsize_tf.core import cp


def _kernels(heads=6, d=24, e=20, p=8, shared=12, seed=0):
    """Per-head kernels whose heads share a `shared`-dim subspace plus noise."""
    rng = np.random.default_rng(seed)
    bq = rng.normal(size=(d, shared))
    bk = rng.normal(size=(e, shared))
    q = np.stack(
        [bq @ rng.normal(size=(shared, p)) + 0.1 * rng.normal(size=(d, p)) for _ in range(heads)]
    )
    k = np.stack(
        [bk @ rng.normal(size=(shared, p)) + 0.1 * rng.normal(size=(e, p)) for _ in range(heads)]
    )
    return q, k


def _dense_error(q, k, result):
    dense = cp.dense_head_products(q, k)
    approx = tl.cp_to_tensor(
        (np.ones(result.mixing.shape[1]), [result.mixing, result.query_factor, result.key_factor])
    )
    return np.linalg.norm(dense - approx) / np.linalg.norm(dense)


class CPTest(tf.test.TestCase, parameterized.TestCase):
    def test_exact_at_full_rank(self):
        q, k = _kernels()
        for rank in (6 * 8, 6 * 8 + 5):
            result = cp.exact_cp(q, k, rank)
            self.assertEqual(result.relative_error, 0.0)
            self.assertLess(_dense_error(q, k, result), 1e-12)
            self.assertEqual(result.mixing.shape, (6, rank))

    @parameterized.parameters(4, 12, 24)
    def test_reported_error_is_the_dense_error(self, rank):
        q, k = _kernels()
        result = cp.head_products_cp(q, k, rank, max_iter=50)
        self.assertAllClose(result.relative_error, _dense_error(q, k, result), atol=1e-9)
        self.assertAllClose(
            cp.structured_error(q, k, result.query_factor, result.key_factor, result.mixing),
            result.relative_error,
            atol=1e-9,
        )

    def test_recovers_an_exact_low_rank_tensor(self):
        rng = np.random.default_rng(3)
        u, v, m = rng.normal(size=(20, 5)), rng.normal(size=(18, 5)), rng.normal(size=(4, 5))
        # A_h = U diag(m_h), B_h = V: T_h = U diag(m_h) V^T has CP rank 5 (p = 5).
        q = np.stack([u * m[h] for h in range(4)])
        k = np.stack([v for _ in range(4)])
        result = cp.head_products_cp(q, k, 5, max_iter=500, tol=0)
        self.assertLess(result.relative_error, 1e-4)

    def test_no_worse_than_tensorly_default_at_equal_sweeps(self):
        q, k = _kernels(seed=1)
        ours = cp.head_products_cp(q, k, 10, max_iter=100, tol=0)
        theirs = cp.tensorly_cp(q, k, 10, n_iter_max=100, init="svd", tol=0)
        self.assertLessEqual(ours.relative_error, theirs.relative_error + 1e-6)

    def test_balanced_factors_keep_the_product(self):
        q, k = _kernels()
        result = cp.head_products_cp(q, k, 8, max_iter=30)
        norms = [
            np.linalg.norm(x, axis=0)
            for x in (result.query_factor, result.key_factor, result.mixing)
        ]
        self.assertAllClose(norms[0], norms[1], rtol=1e-6)
        self.assertAllClose(norms[0], norms[2], rtol=1e-6)

    def test_bad_inputs(self):
        q, k = _kernels()
        for rank in (0, -3, 2.5, True):
            with self.assertRaisesRegex(ValueError, "shared_key_dim.*positive integer"):
                cp.head_products_cp(q, k, rank)
        with self.assertRaisesRegex(ValueError, "agree in heads"):
            cp.head_products_cp(q, k[:3], 4)
        with self.assertRaisesRegex(ValueError, "needs shared_key_dim >= heads \\* head_size"):
            cp.exact_cp(q, k, 10)
        with self.assertRaisesRegex(ValueError, "init must be"):
            cp.head_products_cp(q, k, 4, init="hosvd")
