"""The rank tasks: seeded, every answer a copy of one distinct earlier token, and the
solving pattern's rank what each task claims (numpy's matrix_rank as the oracle)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headsize_tf.data import rank_tasks

TASKS = sorted(rank_tasks.TASKS)
COPY_TASKS = [t for t in TASKS if t not in rank_tasks.SIZED]


@pytest.mark.parametrize("task", TASKS)
def test_seeded(task):
    a = rank_tasks.make_batch(task, 8, 64, seed=3)
    b = rank_tasks.make_batch(task, 8, 64, seed=3)
    c = rank_tasks.make_batch(task, 8, 64, seed=4)
    for field in ("inputs", "targets", "weights", "sources"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert not np.array_equal(a.inputs, c.inputs)


@settings(max_examples=30, deadline=None)
@given(
    task=st.sampled_from(TASKS),
    n=st.integers(20, 512),
    batch=st.integers(1, 4),
    seed=st.integers(0, 2**31),
)
def test_every_answer_is_a_copy_of_one_earlier_token(task, n, batch, seed):
    b = rank_tasks.make_batch(task, batch, n, seed)
    m = rank_tasks.SIZES[task](n)
    assert b.inputs.shape == b.targets.shape == b.weights.shape == b.sources.shape == (batch, n)
    assert b.needed_rank == m
    assert b.inputs.max() < b.vocab_size == rank_tasks.vocab_size(task, n)
    np.testing.assert_array_equal(b.targets[:, :-1], b.inputs[:, 1:])
    for i in range(batch):
        rows = np.flatnonzero(b.weights[i])
        if task in rank_tasks.SIZED:  # preference: each query symbol's first occurrence.
            k = 2 if task == "pairwise" else m // 2
            queries = b.inputs[i, rows]
            assert 0 < len(rows) <= (n - k - 1) // 2
            assert len(set(queries.tolist())) == len(rows)
            asked = b.inputs[i, k + 1 : k + 1 + 2 * ((n - k - 1) // 2) : 2]
            assert set(asked.tolist()) == set(queries.tolist())
        else:
            assert len(rows) == m
        np.testing.assert_array_equal(rows, np.flatnonzero(b.sources[i] >= 0))
        sources = b.sources[i, rows]
        assert (sources < rows).all()  # Causal: the source is already seen.
        # The answer is the source's token.
        np.testing.assert_array_equal(b.targets[i, rows], b.inputs[i, sources])
        pattern = b.solving_pattern(i)
        np.testing.assert_array_equal(pattern.sum(1), b.weights[i])
        if task in rank_tasks.SIZED:
            continue
        # The copy tasks: every query reads its own position, so the solving pattern has
        # the rank the task claims.
        assert len(set(sources.tolist())) == m
        assert np.linalg.matrix_rank(pattern) == b.needed_rank


def test_recall_queries_ask_every_key_once_and_keys_are_unique():
    b = rank_tasks.associative_recall(16, 128, seed=0)
    m = 32
    for i in range(16):
        keys = b.inputs[i, 0 : 2 * m : 2]
        queries = b.inputs[i, 2 * m : 4 * m : 2]
        assert len(set(keys.tolist())) == m
        assert sorted(queries.tolist()) == sorted(keys.tolist())
        # The source is the value right after the matching key.
        for row in np.flatnonzero(b.weights[i]):
            assert b.inputs[i, b.sources[i, row] - 1] == b.inputs[i, row]


def test_gather_index_tokens_name_their_source_position():
    b = rank_tasks.gather(8, 64, seed=1)
    m = 21
    for i in range(8):
        rows = np.flatnonzero(b.weights[i])
        np.testing.assert_array_equal(
            b.inputs[i, rows] - rank_tasks.FIRST_SYMBOL, b.sources[i, rows]
        )
        assert b.inputs[i, m] == rank_tasks.SEP
        assert (b.inputs[i, 3 * m + 1 :] == rank_tasks.PAD).all()


def test_sorting_outputs_the_inputs_in_ascending_order_and_plus_one_is_a_poor_guess():
    b = rank_tasks.sorting(8, 65, seed=2)
    m = 32
    for i in range(8):
        x, y = b.inputs[i, :m], b.inputs[i, m + 1 : 2 * m + 1]
        assert len(set(x.tolist())) == m
        np.testing.assert_array_equal(y, np.sort(x))
        np.testing.assert_array_equal(b.targets[i, m : 2 * m], y)
    # Guessing "the last output + 1" (no attention) gets about a quarter of the answers.
    plus_one = (b.targets[:, m + 1 : 2 * m] == b.inputs[:, m + 1 : 2 * m] + 1).mean()
    assert 0.1 < plus_one < 0.4


def test_preference_answers_are_the_preferred_candidates():
    k_symbols = 16
    b = rank_tasks.preference(8, 64, seed=5, num_symbols=k_symbols)
    scores = rank_tasks.preference_scores(k_symbols)
    base = rank_tasks.FIRST_SYMBOL + k_symbols
    for i in range(8):
        candidates = b.inputs[i, : k_symbols // 2] - base
        assert len(set(candidates.tolist())) == k_symbols // 2
        for row in np.flatnonzero(b.weights[i]):
            q = b.inputs[i, row] - rank_tasks.FIRST_SYMBOL
            assert b.targets[i, row] - base == candidates[scores[q, candidates].argmax()]
    # S is a task constant: another seed, the same preferences.
    np.testing.assert_array_equal(scores, rank_tasks.preference_scores(k_symbols))


def test_pairwise_asks_which_of_two_candidates_each_query_prefers():
    b = rank_tasks.pairwise(16, 64, seed=1, num_symbols=128)
    scores = rank_tasks.preference_scores(128)
    base = rank_tasks.FIRST_SYMBOL + 128
    for i in range(16):
        c1, c2 = b.inputs[i, :2] - base
        assert c1 != c2 and b.inputs[i, 2] == rank_tasks.SEP
        for row in np.flatnonzero(b.weights[i]):
            q = b.inputs[i, row] - rank_tasks.FIRST_SYMBOL
            best = c1 if scores[q, c1] > scores[q, c2] else c2
            assert b.targets[i, row] - base == best
            assert b.sources[i, row] == (0 if best == c1 else 1)


@pytest.mark.parametrize("k_symbols", [16, 64])
def test_preference_needs_logits_of_rank_k(k_symbols):
    # The numpy oracle of the bottleneck: logits of rank r < K (the best rank-r
    # approximation of S, Eckart-Young) give other answers on many queries, and the
    # error grows as r falls; rank K gives every answer.
    scores = rank_tasks.preference_scores(k_symbols)
    assert np.linalg.matrix_rank(scores) == k_symbols
    b = rank_tasks.preference(64, 4 * k_symbols, seed=0, num_symbols=k_symbols)
    u, s, vt = np.linalg.svd(scores)
    k = k_symbols // 2

    def accuracy(r):
        approx = (u[:, :r] * s[:r]) @ vt[:r]
        hits = total = 0
        for i in range(len(b.inputs)):
            candidates = b.inputs[i, :k] - rank_tasks.FIRST_SYMBOL - k_symbols
            rows = np.flatnonzero(b.weights[i])
            q = b.inputs[i, rows] - rank_tasks.FIRST_SYMBOL
            picked = candidates[approx[q][:, candidates].argmax(-1)]
            hits += (picked == b.targets[i, rows] - rank_tasks.FIRST_SYMBOL - k_symbols).sum()
            total += len(rows)
        return hits / total

    by_rank = [accuracy(r) for r in (k_symbols // 8, k_symbols // 4, k_symbols // 2, k_symbols)]
    assert by_rank[-1] == 1.0
    assert by_rank[0] < by_rank[1] < by_rank[2] < 0.95
    assert by_rank[0] < 0.6


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: rank_tasks.make_batch("copy", 1, 64, 0), "task='copy'"),
        (lambda: rank_tasks.gather(1, 4, 0), "sequence_length=4"),
        (lambda: rank_tasks.sorting(1, 64, 0, num_symbols=3), "num_symbols=3"),
        (lambda: rank_tasks.associative_recall(0, 64, 0), "batch_size=0"),
        (lambda: rank_tasks.preference(1, 64, 0, num_symbols=1), "num_symbols=1"),
        (lambda: rank_tasks.make_batch("gather", 1, 64, 0, rank=8), "rank=8"),
    ],
)
def test_bad_arguments_name_the_value(call, message):
    with pytest.raises(ValueError, match=message):
        call()
