"""Keras Tuner over attention kind, heads, head size and shared key dim.

Trials train a registered experiment with Model Garden's trainer
(`headsize_tf.training.train.run`), so any of our experiments can be tuned
as configured. Keras Tuner imports Keras 3 and rejects tf_keras models, so the
tuners here override `run_trial` (train, return the metrics) and never hand a
model to Keras Tuner; nothing is aliased globally. A parameter budget skips
configurations over it (recorded as skipped, not trained) or, in "match
params" mode, sets the head count to land on the budget
(`headsize_tf.params.match_num_heads`; a match more than 5% over the budget,
e.g. standard attention whose size ignores the head count, is skipped).
Everything a search is given is checked before a trial trains
(`headsize_tf.tuning.settings`). Trials resume after interruption from the
tuner's own directory, for a search started with the same settings
(`search.json` in the output records them).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import pathlib
from collections.abc import Mapping
from typing import Any

import keras_tuner
import yaml

from headsize_tf.core.io import write_atomic, write_json
from headsize_tf.core.search_space import (
    FIELDS,
    PER_LAYER,
    TUNERS,
    SearchSpace,
    SearchSpaceError,
    check_space,
)
from headsize_tf.tuning.settings import (
    check_arguments,
    check_settings,
    objective_from,
    record_settings,
    settings_record,
)

_FIELDS = FIELDS


class HeadsizeHyperModel(keras_tuner.HyperModel):
    """Declares the space and builds a trial's *configuration* (not a model).

    `build(hp)` returns `{field: value}` for `task.model` (LM) or
    `task.model.encoder.any` (encoders); the tuner trains it. `head_size` is
    active only for fixed_head (and collaborative, where it is the value head
    size) and `shared_key_dim` only for collaborative attention.
    """

    def __init__(self, space: SearchSpace, defaults: Mapping[str, Any]):
        super().__init__(name="headsize", tunable=True)
        self.space = space
        self.defaults = dict(defaults)

    def build(self, hp) -> dict[str, Any]:
        return self.space.declare(hp, self.defaults)


def model_prefix(params) -> str:
    """Where the attention fields live: `task.model` (LM) or the encoder's `any`."""
    from headsize_tf.configs import language_modeling

    if isinstance(params.task.model, language_modeling.CausalLMConfig):
        return "task.model"
    return "task.model.encoder.any"


def _model_config(params):
    config = params.task.model
    return config if model_prefix(params) == "task.model" else config.encoder.any


def _get(config, path: str) -> Any:
    for key in path.split("."):
        config = getattr(config, key)
    return config


def _nested(trial: Mapping[str, Any]) -> dict[str, Any]:
    """{"attention": {"kind": ...}, "hidden_size": ...} from a trial's values."""
    out: dict[str, Any] = {}
    for name, value in trial.items():
        *parents, leaf = _FIELDS[name].split(".")
        node = out
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return out


def defaults_from_params(params) -> dict[str, Any]:
    config = _model_config(params)
    return {name: _get(config, field) for name, field in _FIELDS.items()}


def count_params(params, trial: Mapping[str, Any]) -> int:
    """Trainable parameters of the experiment's model with `trial`'s values."""
    from headsize_tf import params as counts
    from headsize_tf.configs import encoders, language_modeling

    base = _model_config(params)
    config = base.replace(**_nested(trial))
    if model_prefix(params) == "task.model":
        language_modeling.validate(config)
        return counts.causal_lm_params(language_modeling.to_spec(config)).trainable
    encoders.validate(config)
    return counts.encoder_params(encoders.to_spec(config)).trainable


def overrides(
    prefix: str, trial: Mapping[str, Any], extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Nested override dict setting the trial's fields (None included) and `extra`."""
    out: dict[str, Any] = {}

    def put(path: str, value: Any) -> None:
        node = out
        *parents, leaf = path.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value

    for name, value in trial.items():
        put(f"{prefix}.{_FIELDS[name]}", value)
    for path, value in (extra or {}).items():
        put(path, value)
    return out


@dataclasses.dataclass
class TrialRunner:
    """Trains one trial's configuration; shared by the three tuner classes."""

    experiment: str
    config_files: tuple[str, ...]
    output: pathlib.Path
    hypermodel: HeadsizeHyperModel
    objective: keras_tuner.Objective
    base_params: Any
    data_dir: str | None = None
    budget_params: int | None = None
    match_params: bool = False
    steps_per_epoch: int | None = None
    seed: int = 0

    def trial_config(self, hp) -> dict[str, Any]:
        from headsize_tf import params as counts

        config = self.hypermodel.build(hp)
        if self.match_params and self.budget_params:

            def count(heads: int) -> int:
                return count_params(self.base_params, {**config, "num_heads": heads})

            config["num_heads"] = counts.match_num_heads(self.budget_params, count, range(1, 257))
        return config

    def __call__(self, trial) -> dict[str, float]:
        from headsize_tf.training import train

        hp = trial.hyperparameters
        config = self.trial_config(hp)
        trial_dir = self.output / "trials" / trial.trial_id
        record: dict[str, Any] = {"trial_id": trial.trial_id, "config": config}
        try:
            record["params"] = count_params(self.base_params, config)
        except ValueError as err:
            record.update(status="invalid", message=str(err))
            write_json(trial_dir / "record.json", record)
            raise keras_tuner.errors.FailedTrialError(f"invalid configuration: {err}") from None
        # Matched head counts land near, not under, the budget: allow 5% over there.
        limit = (
            self.budget_params * (1.05 if self.match_params else 1.0) if self.budget_params else 0
        )
        if self.budget_params and record["params"] > limit:
            record.update(
                status="skipped", message=f"{record['params']} params > budget {self.budget_params}"
            )
            write_json(trial_dir / "record.json", record)
            print(f"[trial {trial.trial_id}] skipped: {record['message']} ({config})", flush=True)
            raise keras_tuner.errors.FailedTrialError(record["message"])
        extra = {}
        if "tuner/epochs" in hp.values and self.steps_per_epoch:
            record["epochs"] = int(hp.values["tuner/epochs"])
            extra["trainer.train_steps"] = record["epochs"] * self.steps_per_epoch
        override = overrides(model_prefix(self.base_params), config, extra)
        print(
            f"[trial {trial.trial_id}] training {config} ({record['params']:,} params)", flush=True
        )
        try:
            result = train.run(
                self.experiment,
                str(trial_dir / "model"),
                list(self.config_files),
                override,
                data_dir=self.data_dir,
                seed=self.seed,
            )
        except (ValueError, RuntimeError) as err:
            record.update(status="failed", message=str(err).splitlines()[0][:300])
            write_json(trial_dir / "record.json", record)
            raise keras_tuner.errors.FailedTrialError(record["message"]) from None
        metrics = {k: float(v) for k, v in result.metrics.items()}
        if self.objective.name not in metrics:
            # A ValueError too: the CLI shows it in one line.
            raise keras_tuner.errors.FatalValueError(
                f"Objective {self.objective.name!r} is not among the metrics that "
                f"{self.experiment} reports: {sorted(metrics)}; pass one of them as objective=."
            )
        record.update(status="ok", metrics=metrics, override=override)
        write_json(trial_dir / "record.json", record)
        print(
            f"[trial {trial.trial_id}] {self.objective.name} = {metrics[self.objective.name]:.4f}",
            flush=True,
        )
        return metrics


def _tuner_class(base):
    class HeadsizeTuner(base):
        """Keras Tuner `{base}` whose trials train a Model Garden experiment."""

        def __init__(self, runner: TrialRunner, **kwargs):
            self.runner = runner
            super().__init__(hypermodel=runner.hypermodel, objective=runner.objective, **kwargs)

        def run_trial(self, trial, *args, **kwargs):
            return self.runner(trial)

    HeadsizeTuner.__name__ = f"Headsize{base.__name__}"
    return HeadsizeTuner


HeadsizeRandomSearch = _tuner_class(keras_tuner.RandomSearch)
HeadsizeBayesianOptimization = _tuner_class(keras_tuner.BayesianOptimization)
HeadsizeHyperband = _tuner_class(keras_tuner.Hyperband)


def _smallest_params(space: SearchSpace, params, hypermodel: HeadsizeHyperModel) -> int | None:
    """Fewest parameters over the space's combinations (None if none is valid)."""
    names = list(space.values)
    grids = [space.choices(n) for n in names]
    best = None
    for combo in itertools.islice(itertools.product(*grids), 5000):
        trial = {k: hypermodel.defaults.get(k) for k in _FIELDS}
        for name, value in zip(names, combo, strict=True):
            if name in PER_LAYER:  # The same value in every layer: parameters grow with it.
                trial[PER_LAYER[name]] = [value] * int(trial["num_layers"])
            else:
                trial[name] = value
        if trial["attention_type"] != "fixed_head":
            trial["head_size"] = None
        if trial["attention_type"] == "collaborative" and not trial.get("shared_key_dim"):
            trial["shared_key_dim"] = trial["width"]
        if trial["attention_type"] != "collaborative":
            trial["shared_key_dim"] = None
        try:
            n = count_params(params, trial)
        except ValueError:
            continue
        best = n if best is None else min(best, n)
    return best


def tune(
    experiment: str,
    search_space: SearchSpace,
    output: str | os.PathLike,
    *,
    config_files: tuple[str, ...] = (),
    tuner: str = "random",
    max_trials: int | None = None,
    budget_params: int | None = None,
    match_params: bool = False,
    objective: str | keras_tuner.Objective | None = None,
    direction: str | None = None,
    max_epochs: int | None = None,
    data_dir: str | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Runs (or resumes) a search; writes results.csv/.md and best.yaml in `output`.

    Args:
      experiment: a registered experiment, trained by each trial.
      search_space: the hyperparameters searched (`SearchSpace`).
      output: the search's folder. A rerun into it resumes the search if it was
        started with the same settings (`search.json` there records them; only
        `max_trials` may change) and is refused otherwise.
      config_files: YAML files overriding the experiment.
      tuner: "random", "bayesian" or "hyperband".
      max_trials: trials of the random and bayesian tuners (default 10); hyperband
        sizes its trials by `max_epochs` and refuses it.
      budget_params: configurations with more trainable parameters are skipped.
      match_params: sets each trial's head count to meet `budget_params` instead
        (one count for every layer; the space then searches no head count).
      objective: a metric that the experiment reports (e.g. "validation_loss") or a
        `keras_tuner.Objective`; default `settings.default_objective`. An unknown
        name is refused before any trial trains.
      direction: "min" or "max" for an objective name (default: "min" for a loss,
        perplexity or error, "max" otherwise).
      max_epochs: hyperband only (default 3): its longest trial trains
        `trainer.train_steps`, the others a fraction of it.
      data_dir: replaces `${DATA_DIR}` in the experiment's input paths.
      seed: the tuner's and each trial's seed (0 to 2**32 - 1).

    Raises:
      SearchSpaceError / TuneError (ValueErrors): arguments, a search space or an
        output that the search cannot run with, before anything is written.
    """
    from headsize_tf.training import train

    check_arguments(
        tuner=tuner,
        tuners=TUNERS,
        max_trials=max_trials,
        max_epochs=max_epochs,
        objective=objective,
        direction=direction,
        budget_params=budget_params,
        match_params=match_params,
        seed=seed,
        space=search_space,
    )
    check_space(search_space)
    if tuner == "hyperband":
        max_epochs = max_epochs or 3
    else:
        max_trials = max_trials or 10
    output = pathlib.Path(output)
    params = train.build_params(experiment, config_files, None, data_dir, "train_and_eval")
    objective = objective_from(objective, direction, params, experiment)
    hypermodel = HeadsizeHyperModel(search_space, defaults_from_params(params))
    if budget_params and not match_params:
        smallest = _smallest_params(search_space, params, hypermodel)
        if smallest is None or smallest > budget_params:
            raise SearchSpaceError(
                f"Budget {budget_params:,} params is below the smallest configuration of the "
                f"search space ({'none is valid' if smallest is None else f'{smallest:,} params'})."
            )
    record = settings_record(
        experiment=experiment,
        params=params,
        space=search_space,
        tuner=tuner,
        objective=objective,
        budget_params=budget_params,
        match_params=match_params,
        max_epochs=max_epochs,
        seed=seed,
    )
    if not check_settings(output, record):
        record_settings(output, record)
    # Hyperband's trials train `tuner/epochs` of `max_epochs` parts of trainer.train_steps.
    steps_per_epoch = max(1, params.trainer.train_steps // max_epochs) if max_epochs else None
    runner = TrialRunner(
        experiment,
        tuple(config_files),
        output,
        hypermodel,
        objective,
        params,
        data_dir,
        budget_params,
        match_params,
        steps_per_epoch,
        seed,
    )
    common = {
        "directory": str(output),
        "project_name": "tuner",
        "overwrite": False,
        "seed": seed,
        "max_consecutive_failed_trials": 10**6,
    }
    if tuner == "random":
        search = HeadsizeRandomSearch(runner, max_trials=max_trials, **common)
    elif tuner == "bayesian":
        search = HeadsizeBayesianOptimization(runner, max_trials=max_trials, **common)
    else:
        search = HeadsizeHyperband(runner, max_epochs=max_epochs, **common)
    search.search()
    return write_results(output, experiment, config_files, objective, data_dir)


def _records(output: pathlib.Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((output / "trials").glob("*/record.json"))]


def write_results(output, experiment, config_files, objective, data_dir=None) -> dict[str, Any]:
    """results.csv, results.md (sorted by the objective) and best.yaml."""
    import csv
    import io

    from headsize_tf.training import train

    records = _records(pathlib.Path(output))
    ok = [r for r in records if r["status"] == "ok"]
    sign = 1 if objective.direction == "min" else -1
    ok.sort(key=lambda r: sign * r["metrics"][objective.name])
    others = [r for r in records if r["status"] != "ok"]
    fields = ["rank", "trial_id", "status", *_FIELDS, "params", objective.name, "message"]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields)
    writer.writeheader()
    rows = []
    for rank, r in enumerate(ok + others, start=1):
        row = {
            "rank": rank if r["status"] == "ok" else "",
            "trial_id": r["trial_id"],
            "status": r["status"],
            **r["config"],
            "params": r.get("params"),
            objective.name: r.get("metrics", {}).get(objective.name, ""),
            "message": r.get("message", ""),
        }
        rows.append(row)
        writer.writerow(row)
    write_atomic(pathlib.Path(output) / "results.csv", buffer.getvalue())
    lines = [
        f"# Tuning {experiment}: {objective.name} ({objective.direction})",
        "",
        "| " + " | ".join(fields) + " |",
        "|" + "---|" * len(fields),
    ]
    for row in rows:
        cells = [
            f"{v:.4f}" if isinstance(v, float) else ("" if v is None else str(v))
            for v in (row[f] for f in fields)
        ]
        lines.append("| " + " | ".join(cells) + " |")
    write_atomic(pathlib.Path(output) / "results.md", "\n".join(lines) + "\n")
    summary = {
        "trials": len(records),
        "completed": len(ok),
        "skipped": sum(r["status"] == "skipped" for r in records),
    }
    if ok:
        best = ok[0]
        params = train.build_params(
            experiment, config_files, best["override"], data_dir, "train_and_eval"
        )
        text = (
            f"# Best trial {best['trial_id']} of `headsize-tf tune`: {objective.name} = "
            f"{best['metrics'][objective.name]:.6g}\n"
            f"# headsize-tf train --experiment {experiment} --config-file best.yaml ...\n"
        )
        write_atomic(
            pathlib.Path(output) / "best.yaml",
            text + yaml.safe_dump(params.as_dict(), sort_keys=False),
        )
        summary["best"] = best
    return summary
