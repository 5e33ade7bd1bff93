"""Where does the head-size bottleneck bind? Trained models on tasks of controlled rank.

Theorem 1 of Bhojanapalli et al. (2020): a head of size p has logits of rank at
most p, so when a task's solving attention needs rank r > p one head cannot
express it, and a fixed head size p independent of the width should win at
equal parameters. The reproduction (results/reproduction_v2) and the attention
rank study (results/attention_rank) found the opposite on text: trained heads
use rank 4 to 6, so the bound never binds. This study trains small causal LMs
on the tasks of `data.rank_tasks`: three copy tasks (associative recall, gather
by position, sorting) whose solving pattern has rank m = the number of answers,
which grows with n, and `preference`, whose logits must reproduce a fixed random
K x K preference matrix (a logit rank of K, set apart from n). At each setting
(task, n, K) it compares:

* `std`: standard heads, h heads of d/h at width d;
* `fixed p`: h heads of size p at width d (p = 2 d/h, and p = min(n, 64): p = n at n = 64);
* `std wide`: standard heads at the width whose parameters match each fixed model
  (widening is what a fixed head size competes with, as in R1);
* `collab D`: collaborative heads sharing a query/key space of D (each head's
  logits have rank up to D, with the standard model's parameters).

Protocol (as the reproduction): AdamW with warm-up and linear decay
(`keras3.lm_training`), fresh seeded batches each step (no epoch, no overfitting),
a learning rate chosen per model on seed 0 from the preset's grid, then the other
seeds at that rate; the learning curve is the answer accuracy on a fixed held-out
set at evenly spaced steps. After training, each head's logits on held-out
examples are read (`attention_rank.recorded_logits`) for the attention rank the
model uses and the attention mass it puts on the answer's source.

Every run writes `runs/<setting>/<model>_lr<lr>_seed<s>.json` under `--output`;
a rerun skips finished runs, then writes `bottleneck.json`, `README.md` (table and
verdict) and `bottleneck.png`. Several processes may share one `--output` (`--only`
splits the settings between them): each claims a run before training it, with the
reproduction's scheduler (`reproduction.scheduler`).

    python -m headsize_tf.experiments.bottleneck --output results/bottleneck

Modules: `presets` (settings, shape and budget), `plan` (models, run names and
files, the runs to do and each model's rate), `runners` (one run on Keras 3),
`report` (`bottleneck.json`, README and plot, from `bottleneck.report`'s summary),
`__main__` (the command).

References:
  Bhojanapalli et al. (2020), "Low-Rank Bottleneck in Multi-head Attention Models".
  Cordonnier, Loukas & Jaggi (2020), "Multi-Head Attention: Collaborate Instead of
  Concatenate".
"""
