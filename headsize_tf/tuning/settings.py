"""What a `headsize-tf tune` search runs with, checked before any trial trains.

* `metric_names`: the validation metrics an experiment's task reports (the
  names an objective may take), known from the task before training.
* `default_objective` / `objective_from`: the objective a search ranks by and
  its direction.
* `check_settings`: a search's settings are recorded in `search.json` in its
  output; a rerun resumes only a search with the same settings.
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Mapping
from typing import Any

import keras_tuner

from headsize_tf.core.io import write_json
from headsize_tf.core.search_space import SearchSpace, SearchSpaceError
from headsize_tf.core.spec import is_positive_int
from headsize_tf.training.train import flat_fields

SETTINGS_FILE = "search.json"  # In a search's output: what the search was started with.
MAX_SEED = 2**32 - 1  # NumPy's seeds are 32-bit.
# Metric names ranked lowest first; every other metric (accuracy, AUC, F1, correlations)
# ranks highest first.
_LOWER_IS_BETTER = ("loss", "perplexity", "error")
# Reported by Model Garden's QuestionAnsweringTask at the end of validation (the official
# SQuAD scripts); its validation data has no answer positions, hence no validation loss.
_SQUAD_V1_METRICS = ("exact_match", "final_f1")
_SQUAD_V2_METRICS = (
    "exact_match",
    "exact_match_threshold",
    "final_f1",
    "f1_threshold",
    "has_answer_exact_match",
    "has_answer_f1",
)


class TuneError(ValueError):
    """Settings a search cannot run with: an unknown objective, an option its tuner does not
    use, or an output that holds a search started with other settings."""


def metric_names(params: Any) -> frozenset[str] | None:
    """The metrics a trial of `params` (an `ExperimentConfig`) reports, or None if unknown.

    These are the names of the task's validation metrics (`build_metrics(training=False)`),
    Model Garden's trainer's `validation_loss`, and what the task computes at the end of
    validation (`reduce_aggregated_logs`): the `metric_type` of sentence prediction, exact
    match and F1 of span labeling. A task of another kind is None.
    """
    from official.core import task_factory
    from official.nlp.tasks import masked_lm, question_answering, sentence_prediction

    from headsize_tf import tasks

    if isinstance(params.task, question_answering.QuestionAnsweringConfig):
        # Not built: the task reads and tokenises its validation set when built.
        v2 = params.task.validation_data.version_2_with_negative
        return frozenset(_SQUAD_V2_METRICS if v2 else _SQUAD_V1_METRICS)
    task = task_factory.get_task(params.task)
    known = (
        tasks.LanguageModelingTask,
        tasks.TranslationTask,
        masked_lm.MaskedLMTask,
        sentence_prediction.SentencePredictionTask,
    )
    if not isinstance(task, known):
        return None
    names = {metric.name for metric in task.build_metrics(training=False)}
    names.add("validation_loss")
    if isinstance(task, sentence_prediction.SentencePredictionTask):
        if task.metric_type != "accuracy":
            names.add(task.metric_type)
    trainer = params.trainer
    if trainer.best_checkpoint_export_subdir and trainer.best_checkpoint_eval_metric:
        names.add(f"best_{trainer.best_checkpoint_eval_metric}")
    return frozenset(names)


def default_direction(name: str) -> str:
    """ "min" for a loss, perplexity or error; "max" for anything else (accuracy, AUC, F1)."""
    return "min" if any(word in name for word in _LOWER_IS_BETTER) else "max"


def default_objective(params: Any, names: frozenset[str] | None = None) -> keras_tuner.Objective:
    """validation_loss for language models and translation; cls_accuracy for classifiers,
    final_f1 for span labeling (the first of these that the task reports)."""
    from headsize_tf.configs import language_modeling, translation

    task = params.task
    if isinstance(task.model, language_modeling.CausalLMConfig) or isinstance(
        task, translation.TranslationConfig
    ):
        name = "validation_loss"
    elif names is not None:
        name = next(
            (n for n in ("cls_accuracy", "final_f1", "validation_loss") if n in names),
            "validation_loss",
        )
    else:
        name = "cls_accuracy" if hasattr(task, "metric_type") else "validation_loss"
    return keras_tuner.Objective(name, default_direction(name))


def objective_from(
    objective: str | keras_tuner.Objective | None,
    direction: str | None,
    params: Any,
    experiment: str,
) -> keras_tuner.Objective:
    """The objective of a search, checked against the metrics the experiment reports.

    `objective` is a metric name (its direction `direction`, or `default_direction`)
    or a `keras_tuner.Objective`; None is `default_objective`.
    """
    names = metric_names(params)
    if objective is None:
        return default_objective(params, names)
    if isinstance(objective, keras_tuner.Objective):
        name = objective.name
    else:
        name = objective
        objective = keras_tuner.Objective(name, direction or default_direction(name))
    if names is not None and name not in names:
        raise TuneError(
            f"Objective {name!r} is not a metric that {experiment} reports; expected one of "
            f"{sorted(names)}."
        )
    return objective


def check_arguments(
    *,
    tuner: str,
    tuners: tuple[str, ...],
    max_trials: int | None,
    max_epochs: int | None,
    objective: str | keras_tuner.Objective | None,
    direction: str | None,
    budget_params: int | None,
    match_params: bool,
    seed: int,
    space: SearchSpace,
) -> None:
    """Raises SearchSpaceError / TuneError for arguments of `tune` that cannot run.

    Messages name the arguments as `name=` (the CLI shows them as `--name`).
    """
    if tuner not in tuners:
        raise SearchSpaceError(f"Unknown tuner {tuner!r}; expected one of {list(tuners)}.")
    if tuner == "hyperband":
        if max_trials is not None:
            raise TuneError(
                "max_trials= is not used by the hyperband tuner (max_epochs= sizes its "
                "trials); use it with the random or bayesian tuner."
            )
    elif max_epochs is not None:
        raise TuneError(
            f"max_epochs= is used by the hyperband tuner only, not by the {tuner} tuner "
            "(max_trials= sets its number of trials)."
        )
    for label, value in (("max_trials", max_trials), ("max_epochs", max_epochs)):
        if value is not None and not is_positive_int(value):
            raise TuneError(f"{label}= must be a positive integer; got {value!r}.")
    if budget_params is not None and not is_positive_int(budget_params):
        raise TuneError(f"budget_params= must be a positive integer; got {budget_params!r}.")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise TuneError(f"seed= must be an integer from 0 to {MAX_SEED}; got {seed!r}.")
    if direction is not None:
        if direction not in ("min", "max"):
            raise TuneError(f"Unknown direction {direction!r}; expected 'min' or 'max'.")
        if objective is None:
            raise TuneError(
                "direction= needs objective= (the default objective comes with its own direction)."
            )
        if isinstance(objective, keras_tuner.Objective):
            raise TuneError(
                "direction= goes with an objective name; a keras_tuner.Objective has its own."
            )
    if isinstance(objective, str) and not objective.strip():
        raise TuneError("objective= is empty; give a metric name such as validation_loss.")
    if match_params and not budget_params:
        raise SearchSpaceError("match_params=True needs budget_params=.")
    if match_params and "num_heads_per_layer" in space.values:
        raise SearchSpaceError(
            "match_params=True sets one head count for every layer; it cannot with "
            "num_heads_per_layer in the search space."
        )
    if match_params and "num_heads" in space.values:
        raise SearchSpaceError(
            "match_params=True sets num_heads to meet the budget; drop num_heads from the "
            "search space (its choices would be replaced by the matched count)."
        )


def settings_record(
    *,
    experiment: str,
    params: Any,
    space: SearchSpace,
    tuner: str,
    objective: keras_tuner.Objective,
    budget_params: int | None,
    match_params: bool,
    max_epochs: int | None,
    seed: int,
) -> dict[str, Any]:
    """What a search is started with (JSON values): everything that changes its trials.

    `config` is the experiment's whole configuration (after its config files and
    data dir); the number of trials is left out, so that a rerun can extend a search.
    """
    record = {
        "experiment": experiment,
        "config": params.as_dict(),
        "search_space": space.values,
        "tuner": tuner,
        "objective": objective.name,
        "direction": objective.direction,
        "budget_params": budget_params,
        "match_params": match_params,
        "max_epochs": max_epochs,
        "seed": seed,
    }
    return json.loads(json.dumps(record))


def _differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """What differs, each named as the argument of `tune` that sets it (`tuner=`)."""
    out = []
    for key in current:
        if key == "config" and saved.get(key) != current[key]:
            old, new = flat_fields(saved.get(key) or {}), flat_fields(current[key])
            paths = sorted(p for p in set(old) | set(new) if old.get(p) != new.get(p))
            shown = ", ".join(f"{p} {new.get(p)!r} (was {old.get(p)!r})" for p in paths[:3])
            more = f" and {len(paths) - 3} more" if len(paths) > 3 else ""
            out.append(
                f"the experiment's configuration (its config files, data_dir=): {shown}{more}"
            )
        elif key not in saved:
            out.append(f"{key}= {current[key]!r} (not recorded)")
        elif saved[key] != current[key]:
            out.append(f"{key}= {current[key]!r} (was {saved[key]!r})")
    return out


def check_settings(output: str | os.PathLike, record: Mapping[str, Any]) -> bool:
    """Raises TuneError if `output` holds a search started with other settings.

    Returns whether `output` has a settings record already (False: write one).
    An output with a tuner state but no record (as an older version leaves it)
    resumes as it is.
    """
    path = pathlib.Path(output) / SETTINGS_FILE
    if not path.is_file():
        return False
    try:
        saved = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise TuneError(
            f"{path} is not a settings record of `headsize-tf tune`; use another output=."
        ) from None
    if not isinstance(saved, Mapping):
        raise TuneError(
            f"{path} is not a settings record of `headsize-tf tune`; use another output=."
        )
    differences = _differences(saved, record)
    if differences:
        raise TuneError(
            f"{output} holds a search started with other settings: {'; '.join(differences)}. "
            "A rerun resumes only the same search; use another output= for a new one."
        )
    return True


def record_settings(output: str | os.PathLike, record: Mapping[str, Any]) -> None:
    """Writes `record` as the output's settings record (atomically)."""
    write_json(pathlib.Path(output) / SETTINGS_FILE, dict(record))
