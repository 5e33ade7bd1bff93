"""Synthetic sequence tasks whose solving attention has a known, controlled rank.

Theorem 1 of Bhojanapalli et al. (2020): a head of size p computes logits
Q K^T of rank at most p, so when a task needs an attention pattern of rank
r > p, one head cannot express it exactly. Each task here is a causal
language-model task (predict the next token; only the answer positions count)
in which every answer is a copy of one earlier token, the *source*. Reading
the source is the solving attention pattern: a 0/1 matrix whose answer rows
each hold one 1, at distinct columns. Its rank, the **needed rank**, is the
number of answers m, which the sequence length n sets (m grows with n).

The first three tasks differ in what the query has to match, so in what the logits
must compute to put the most weight on the source:

* `associative_recall`: m (key, value) pairs, then the m keys again in a new
  order, each followed by its value. A query key matches its own key among m
  (content against content; an induction head: the value sits right after
  its key). The logits restricted to the keys form an m x m permutation.
* `gather`: m symbols, then m position-index tokens in a random order, each
  followed by the symbol at that position. A query matches a *position*
  (content against position): the logits between index tokens and positions
  form an m x m permutation.
* `sorting`: m distinct symbols, a separator, then the same symbols in
  ascending order. Each output looks for the smallest input larger than the
  last output: a step function of the symbol pair, whose matrix over the
  symbols is triangular (full rank), not only a permutation.

Their needed rank is that of the exact pattern. A low-rank logit matrix can put
most of a softmax's weight on the right place when its scale is large enough
(near-orthogonal keys), so a head smaller than m is *expected* to struggle, not
proved unable to.

* `preference`: K candidate symbols are ranked for each of K query symbols by
  a fixed random matrix S; each answer is the candidate present that the query
  prefers. The logits must reproduce S's orderings: a *logit* rank of the order
  of K that no scale removes. K is a parameter (default n // 4).

That is what the bottleneck study measures.

Every generator is seeded (`numpy.random.default_rng(seed)`) and framework
free. Token 0 is padding (after the last answer), token 1 the separator,
symbols start at 2.

Example:
  >>> batch = associative_recall(4, sequence_length=64, seed=0)
  >>> batch.inputs.shape, batch.needed_rank
  ((4, 64), 16)

References:
  Bhojanapalli et al. (2020), "Low-Rank Bottleneck in Multi-head Attention Models".
  Olsson et al. (2022), "In-context Learning and Induction Heads".
"""

from __future__ import annotations

import dataclasses

import numpy as np

PAD = 0
SEP = 1
FIRST_SYMBOL = 2


@dataclasses.dataclass(frozen=True)
class TaskBatch:
    """Examples of a rank task, next-token style.

    Args:
      inputs: int32 [batch, n] token ids.
      targets: int32 [batch, n]: the token to predict at each position (the
        next input; 0 past the end).
      weights: float32 [batch, n]: 1 at the answer positions, else 0 (the loss
        and the accuracy count only these).
      sources: int32 [batch, n]: at an answer position, the earlier position
        whose token is the answer (what the solving attention reads); -1 elsewhere.
      needed_rank: The rank the task needs: the copy tasks' solving pattern's (its number
        of answers, m); preference's logits' (K, of the order of).
      vocab_size: Tokens the task uses (padding, separator and its symbols).
    """

    inputs: np.ndarray
    targets: np.ndarray
    weights: np.ndarray
    sources: np.ndarray
    needed_rank: int
    vocab_size: int

    def solving_pattern(self, index: int = 0) -> np.ndarray:
        """The 0/1 [n, n] attention of example `index`: row i reads `sources[i]`."""
        n = self.inputs.shape[1]
        pattern = np.zeros((n, n), np.float64)
        rows = np.flatnonzero(self.sources[index] >= 0)
        pattern[rows, self.sources[index, rows]] = 1.0
        return pattern


def _finish(
    tokens: np.ndarray, answer_rows: np.ndarray, sources: np.ndarray, vocab: int, m: int
) -> TaskBatch:
    """Next-token targets of full sequences `tokens` [batch, length <= n] padded to n."""
    batch, n = tokens.shape
    targets = np.zeros_like(tokens)
    targets[:, :-1] = tokens[:, 1:]
    weights = np.zeros((batch, n), np.float32)
    source_map = np.full((batch, n), -1, np.int32)
    rows = np.arange(batch)[:, None]
    weights[rows, answer_rows] = 1.0
    source_map[rows, answer_rows] = sources
    return TaskBatch(
        inputs=tokens.astype(np.int32),
        targets=targets.astype(np.int32),
        weights=weights,
        sources=source_map,
        needed_rank=m,
        vocab_size=vocab,
    )


def _check(name: str, value: int, minimum: int) -> None:
    if not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"{name}={value!r}: expected an int >= {minimum}.")


def recall_size(sequence_length: int) -> int:
    """Pairs of `associative_recall` at length n: n // 4."""
    return sequence_length // 4


def associative_recall(
    batch_size: int,
    sequence_length: int,
    seed: int,
    num_values: int = 16,
) -> TaskBatch:
    """`k_1 v_1 ... k_m v_m q_1 a_1 ... q_m a_m` with m = n // 4.

    The keys are a random permutation of m key symbols (all distinct, so each
    query has one source); the values are drawn from `num_values` symbols with
    repetition; the queries are the keys in a second random order, and a_i is
    the value paired with q_i. The answer at q_i's position is read from that
    value's position in the first half.

    Args:
      batch_size: Examples.
      sequence_length: n (a multiple of 4 is filled exactly; otherwise padded).
      seed: Seed of the examples.
      num_values: Value symbols.
    """
    _check("batch_size", batch_size, 1)
    _check("sequence_length", sequence_length, 8)
    _check("num_values", num_values, 2)
    m = recall_size(sequence_length)
    rng = np.random.default_rng(seed)
    key_base, value_base = FIRST_SYMBOL, FIRST_SYMBOL + m
    keys = np.argsort(rng.random((batch_size, m)), axis=1)  # Permutations of 0..m-1.
    values = rng.integers(0, num_values, (batch_size, m))
    order = np.argsort(rng.random((batch_size, m)), axis=1)  # Which pair each query asks.
    rows = np.arange(batch_size)[:, None]
    tokens = np.zeros((batch_size, sequence_length), np.int64)
    tokens[:, 0 : 2 * m : 2] = key_base + keys
    tokens[:, 1 : 2 * m : 2] = value_base + values
    tokens[:, 2 * m : 4 * m : 2] = key_base + keys[rows, order]
    tokens[:, 2 * m + 1 : 4 * m : 2] = value_base + values[rows, order]
    answer_rows = np.broadcast_to(2 * m + 2 * np.arange(m), (batch_size, m))
    sources = 2 * order + 1  # The pair's value position.
    return _finish(tokens, answer_rows, sources, value_base + num_values, m)


def gather_size(sequence_length: int) -> int:
    """Symbols of `gather` at length n: (n - 1) // 3."""
    return (sequence_length - 1) // 3


def gather(
    batch_size: int,
    sequence_length: int,
    seed: int,
    num_symbols: int = 16,
) -> TaskBatch:
    """`x_1 ... x_m SEP i_1 x_{i_1} ... i_m x_{i_m}` with m = (n - 1) // 3.

    x are drawn from `num_symbols` symbols with repetition; i_1..i_m is a random
    permutation of m position-index tokens (index token j names position j).
    The answer at i_k's position is read from position i_k: the query matches a
    position, not a content.

    Args:
      batch_size: Examples.
      sequence_length: n.
      seed: Seed of the examples.
      num_symbols: Content symbols.
    """
    _check("batch_size", batch_size, 1)
    _check("sequence_length", sequence_length, 7)
    _check("num_symbols", num_symbols, 2)
    m = gather_size(sequence_length)
    rng = np.random.default_rng(seed)
    index_base, symbol_base = FIRST_SYMBOL, FIRST_SYMBOL + m
    symbols = rng.integers(0, num_symbols, (batch_size, m))
    order = np.argsort(rng.random((batch_size, m)), axis=1)
    rows = np.arange(batch_size)[:, None]
    tokens = np.zeros((batch_size, sequence_length), np.int64)
    tokens[:, :m] = symbol_base + symbols
    tokens[:, m] = SEP
    tokens[:, m + 1 : 3 * m + 1 : 2] = index_base + order
    tokens[:, m + 2 : 3 * m + 1 : 2] = symbol_base + symbols[rows, order]
    answer_rows = np.broadcast_to(m + 1 + 2 * np.arange(m), (batch_size, m))
    return _finish(tokens, answer_rows, order, symbol_base + num_symbols, m)


def sorting_size(sequence_length: int) -> int:
    """Symbols of `sorting` at length n: (n - 1) // 2."""
    return (sequence_length - 1) // 2


def sorting(
    batch_size: int,
    sequence_length: int,
    seed: int,
    num_symbols: int | None = None,
) -> TaskBatch:
    """`x_1 ... x_m SEP y_1 ... y_m` with m = (n - 1) // 2 and y = sorted(x).

    x are m distinct symbols out of `num_symbols` (default 4m), in random order.
    The answer at SEP is y_1, at y_k it is y_{k+1}: read from the position of the
    smallest input larger than the last output. Guessing "the last output + 1"
    without attention is right on about a quarter of the answers at 4m symbols.

    Args:
      batch_size: Examples.
      sequence_length: n.
      seed: Seed of the examples.
      num_symbols: Symbols to draw from (at least m).
    """
    _check("batch_size", batch_size, 1)
    _check("sequence_length", sequence_length, 5)
    m = sorting_size(sequence_length)
    num_symbols = 4 * m if num_symbols is None else num_symbols
    _check("num_symbols", num_symbols, m)
    rng = np.random.default_rng(seed)
    # m distinct symbols per example: the first m of a random permutation of all.
    chosen = np.argsort(rng.random((batch_size, num_symbols)), axis=1)[:, :m]
    rank = np.argsort(np.argsort(chosen, axis=1), axis=1)  # Position of x_j in y.
    tokens = np.zeros((batch_size, sequence_length), np.int64)
    tokens[:, :m] = FIRST_SYMBOL + chosen
    tokens[:, m] = SEP
    tokens[:, m + 1 : 2 * m + 1] = FIRST_SYMBOL + np.sort(chosen, axis=1)
    # The answer at row m + k (k = 0..m-1) is y_{k+1}, the input of rank k.
    answer_rows = np.broadcast_to(m + np.arange(m), (batch_size, m))
    sources = np.argsort(rank, axis=1)  # sources[:, k] = the input position of rank k.
    return _finish(tokens, answer_rows, sources, FIRST_SYMBOL + num_symbols, m)


# The preference matrices' seed: a task constant, the same for every example and run.
PREFERENCE_SEED = 20_200_520


def preference_scores(num_symbols: int) -> np.ndarray:
    """The fixed [K, K] preference S of `preference` with K symbols (standard normal)."""
    _check("num_symbols", num_symbols, 2)
    return np.random.default_rng([PREFERENCE_SEED, num_symbols]).standard_normal(
        (num_symbols, num_symbols)
    )


def preference(
    batch_size: int,
    sequence_length: int,
    seed: int,
    num_symbols: int | None = None,
    num_candidates: int | None = None,
) -> TaskBatch:
    """`c_1 ... c_k SEP q_1 a_1 q_2 a_2 ...`: each answer is the candidate q prefers.

    A fixed random matrix S (`preference_scores`, K x K, the same for every example)
    ranks the K candidate symbols for each of the K query symbols. An example holds
    k distinct candidates (default K // 2), then queries drawn with repetition until the end;
    the answer to q is the candidate c maximising S[q, c]. Only a query's first
    occurrence is an answer (a repeat could copy its earlier pair). Solving it by
    attention means logits between query and candidate symbols that order each row of
    S as S does on every subset of k candidates: for a generic S that takes a logit
    rank of the order of K (S plus a constant per row keeps its orders at rank K - 1;
    truncating S's SVD changes answers, see the tests), and no scale of the logits
    removes it, unlike the copy tasks' near-orthogonal keys. It is a need of the
    attention route only: a model may also pool the candidates and compute the answer
    in its MLP and output layer, whose rank is the width. Queries may share a source,
    so the solving pattern of one example has rank at most k.

    Args:
      batch_size: Examples.
      sequence_length: n (at least k + 3).
      seed: Seed of the examples (S does not depend on it).
      num_symbols: K, the needed rank (default n // 4).
      num_candidates: k (default K // 2). With many candidates only the top of each
        row of S matters (the best present one is among a query's first few
        preferences); with k = 2 (`pairwise`) every pair's order does.
    """
    _check("batch_size", batch_size, 1)
    num_symbols = sequence_length // 4 if num_symbols is None else num_symbols
    _check("num_symbols", num_symbols, 2)
    k = num_symbols // 2 if num_candidates is None else num_candidates
    _check("num_candidates", k, 2)
    _check("sequence_length", sequence_length, k + 3)
    scores = preference_scores(num_symbols)
    rng = np.random.default_rng(seed)
    query_base, candidate_base = FIRST_SYMBOL, FIRST_SYMBOL + num_symbols
    candidates = np.argsort(rng.random((batch_size, num_symbols)), axis=1)[:, :k]
    count = (sequence_length - k - 1) // 2
    queries = rng.integers(0, num_symbols, (batch_size, count))
    # [batch, queries, candidates] -> the index of the preferred candidate.
    chosen = scores[queries[:, :, None], candidates[:, None, :]].argmax(-1)
    answers = candidates[np.arange(batch_size)[:, None], chosen]
    tokens = np.zeros((batch_size, sequence_length), np.int64)
    tokens[:, :k] = candidate_base + candidates
    tokens[:, k] = SEP
    tokens[:, k + 1 : k + 1 + 2 * count : 2] = query_base + queries
    tokens[:, k + 2 : k + 2 + 2 * count : 2] = candidate_base + answers
    answer_rows = np.broadcast_to(k + 1 + 2 * np.arange(count), (batch_size, count))
    batch = _finish(tokens, answer_rows, chosen, candidate_base + num_symbols, num_symbols)
    # A repeated query's answer could be copied from its first pair without S: only first
    # occurrences count (weight 1, a source); repeats stay in the text as context.
    first = np.zeros((batch_size, count), bool)
    for i in range(batch_size):
        first[i, np.unique(queries[i], return_index=True)[1]] = True
    repeat_rows = answer_rows[~first].reshape(-1)
    example = np.nonzero(~first)[0]
    batch.weights[example, repeat_rows] = 0.0
    batch.sources[example, repeat_rows] = -1
    return batch


def pairwise(
    batch_size: int, sequence_length: int, seed: int, num_symbols: int | None = None
) -> TaskBatch:
    """`preference` with two candidates: `c_1 c_2 SEP q a q a ...`, each answer the one of
    the two that q prefers under S. Every pairwise order of S's rows counts, so a logit
    matrix must order all of each row: a low-rank approximation gets a pair right with
    probability 1/2 + arcsin(rho) / pi, rho its correlation with S (sqrt(r / K) for a
    truncated SVD of rank r); pooling the two candidates does not tell them apart.

    Args:
      batch_size: Examples.
      sequence_length: n.
      seed: Seed of the examples.
      num_symbols: K, the needed rank (default n // 4).
    """
    return preference(batch_size, sequence_length, seed, num_symbols, num_candidates=2)


TASKS = {
    "recall": associative_recall,
    "gather": gather,
    "sorting": sorting,
    "preference": preference,
    "pairwise": pairwise,
}
SIZES = {
    "recall": recall_size,
    "gather": gather_size,
    "sorting": sorting_size,
    "preference": lambda n: n // 4,
    "pairwise": lambda n: n // 4,
}
# The tasks whose size parameter (`num_symbols`) sets the needed rank apart from n.
SIZED = ("preference", "pairwise")


def make_batch(
    task: str, batch_size: int, sequence_length: int, seed: int, rank: int | None = None
) -> TaskBatch:
    """A batch of the task named `task` (one of `TASKS`); `rank` sets K of `preference`
    (the other tasks' needed rank follows n)."""
    if task not in TASKS:
        raise ValueError(f"task={task!r}: expected one of {', '.join(TASKS)}.")
    if rank is not None:
        if task not in SIZED:
            raise ValueError(
                f"rank={rank!r}: only {', '.join(SIZED)} takes a rank; {task}'s follows n."
            )
        return TASKS[task](batch_size, sequence_length, seed, num_symbols=rank)
    return TASKS[task](batch_size, sequence_length, seed)


def needed_rank(task: str, sequence_length: int, rank: int | None = None) -> int:
    """The needed rank of `task` at length n (and `rank`, for the sized tasks)."""
    return rank if rank is not None else SIZES[task](sequence_length)


def vocab_size(task: str, sequence_length: int, rank: int | None = None) -> int:
    """Tokens the task uses at length n (the same for every seed)."""
    return make_batch(task, 1, sequence_length, 0, rank).vocab_size
