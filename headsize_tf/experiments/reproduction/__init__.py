"""Bhojanapalli et al. (2020) R1 and R2 at a budget chosen from learning curves.

The successor of `reproduce` (2 layers, sequence 128, one learning rate, a
guessed budget). Here every model gets its own learning rate from a sweep,
the budget is checked against learning curves, and sequences are long
enough that every head is smaller than the sequence (Theorem 1's regime).

* R1 (their Fig. 1): standard baselines of width w, 1.5w and 2w (4 heads,
  head size = width / 4) vs width w with fixed head size 32 and the head
  count that matches each wider baseline's parameters.
* R2 (their Fig. 3a): width w, heads {2, 4, 8, 16}: baseline (head size =
  w / heads) vs fixed head size 32.

Protocol (the same for every model of a preset):

1. Sweep: seed 0 at the full budget for each learning rate of the grid
   (extended by doubling or halving while the best rate sits at its edge);
   the learning rate with the lowest final *validation* perplexity (Austen's
   held-out Northanger Abbey) is the model's.
2. Seeds: seeds 1 and 2 at that learning rate (seed 0 is the sweep's run).
3. Every run evaluates validation perplexity at `curve_points` checkpoints
   (the learning curve) and test perplexity (Persuasion) at the end; claims
   are judged on test perplexity, mean ± std over 3 seeds, with
   `reproduce`'s rule (a difference counts when the 1-std bars do not
   overlap). A compared pair's ordering is "settled" when its sign (on the
   seed-mean validation curves) holds from the middle checkpoint to the last;
   the report says which pairs are not, i.e. where the budget is still too
   short.

AdamW with linear warm-up (10% of steps) and linear decay to zero (the
T2T-style schedule of the paper's setting, with a linear in place of an
inverse-square-root decay so that every budget ends annealed), dropout 0.1,
pre-LN blocks, WordPiece vocabulary 4096. Each run writes its own file
(with the device it ran on), so runs from CPU and GPU sessions combine and a
rerun skips finished runs; the summary is rebuilt from the files.

    python -m headsize_tf.experiments.reproduction --preset cpu --output results/reproduction_v2

`--framework keras3` trains with the Keras 3 runner (`lm_keras3`) on
`KERAS_BACKEND`, so the grid also runs where only JAX is installed (a GPU
image with JAX alone: `benchmarks/reproduction_device.sh`); its runs are a grid of
their own (same protocol, another data order), never mixed with these.
`--workers N` trains N runs at once (`scheduler`).

Modules: `presets` (shape and budget), `plan` (models, run names),
`runners` (one run, tf_keras or Keras 3), `sweep` (each model's learning
rate, the runs to do), `summary` (rows, curves, orderings), `scheduler`
(workers and their claims), `report` (verdicts, README, plots; shared with
`reproduce`), `__main__` (the command).
"""
