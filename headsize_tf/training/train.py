"""`headsize-tf train`: Model Garden's trainer on our registered experiments.

Validates everything (experiment name, YAML fields, attention settings, data
files, strategy) before anything is written to `model_dir`; then runs
`official.core.train_lib.run_experiment`, which writes TensorBoard summaries
and checkpoints to `model_dir` and resumes from the latest checkpoint there.
"""

from __future__ import annotations

import dataclasses
import os
import re
import typing
from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf

from headsize_tf.core.errors import CheckpointError
from headsize_tf.core.spec import LEGACY_KEYS

STRATEGIES = ("default", "mirrored", "multi_worker_mirrored", "tpu")
MODES = ("train", "eval", "train_and_eval")
DATA_DIR_TOKEN = "${DATA_DIR}"
MAX_CPU_DEVICES = 256  # Logical CPU devices (`--cpu-devices`): each costs TF a thread pool.
EXPERIMENT_FILE = "headsize_experiment.json"  # Names the experiment of a model_dir.


class ConfigError(ValueError):
    """A bad experiment name, config file, override or field value."""


def build_params(
    experiment: str,
    config_files: Sequence[str] = (),
    params_override: str | dict | None = None,
    data_dir: str | None = None,
    mode: str | None = None,
):
    """The validated `ExperimentConfig` of a registered experiment.

    `params_override` is a `a.b=c,...` string or a nested dict (which can set None).
    With a `mode` ("train", "eval" or "train_and_eval") the data it reads must
    name its files or TFDS dataset, and every file named must exist; without
    one (None) only `${DATA_DIR}` is filled in: the config alone, as
    `--print-config` shows it and a model is built from it.
    """
    from official.core import exp_factory
    from official.modeling import hyperparams

    from headsize_tf import tasks  # noqa: F401  (registers the task classes)
    from headsize_tf.configs import encoders as hs_encoders
    from headsize_tf.configs import experiments, language_modeling, translation
    from headsize_tf.data import corpora

    try:
        params = exp_factory.get_exp_config(experiment)
    except (KeyError, LookupError):
        raise ConfigError(
            f"Unknown experiment {experiment!r}; expected one of {list(experiments.EXPERIMENTS)}."
        ) from None
    for path in config_files:
        if not os.path.exists(path):
            raise ConfigError(f"Config file {path!r} does not exist.")
        try:
            params = hyperparams.override_params_dict(params, path, is_strict=True)
        except (KeyError, ValueError, AttributeError) as err:
            raise ConfigError(f"Config file {path!r}: {_field_error(err)}") from None
    if params_override:
        try:
            params = hyperparams.override_params_dict(params, params_override, is_strict=True)
        except (KeyError, ValueError, AttributeError) as err:
            raise ConfigError(
                f"--params-override {params_override!r}: {_field_error(err)}"
            ) from None

    _check_types(params)
    _complete_schedule(params.trainer)
    _check_trainer(params.trainer)
    model = params.task.model
    encoder = getattr(model, "encoder", None)
    try:
        if isinstance(model, language_modeling.CausalLMConfig):
            language_modeling.validate(model)
        elif isinstance(model, translation.Seq2SeqConfig):
            translation.validate(model)
        elif encoder is not None and isinstance(
            getattr(encoder, "any", None), hs_encoders.HeadsizeEncoderConfig
        ):
            hs_encoders.validate(encoder.any)
    except ValueError as err:
        where = "task.model" if encoder is None else "task.model.encoder.any"
        raise ConfigError(f"{where}: {err}") from None

    data_dir = str(data_dir or corpora.default_data_dir())
    needed = {
        "train": {"train_data"},
        "eval": {"validation_data"},
        "train_and_eval": {"train_data", "validation_data"},
    }.get(mode, set())
    for field in ("train_data", "validation_data"):
        data = getattr(params.task, field, None)
        if data is None:
            continue
        if isinstance(getattr(data, "vocab_file", None), str):
            data.vocab_file = data.vocab_file.replace(DATA_DIR_TOKEN, data_dir)
            if mode and data.vocab_file and not os.path.exists(data.vocab_file):
                raise ConfigError(f"task.{field}.vocab_file {data.vocab_file!r} does not exist.")
        if not getattr(data, "input_path", ""):
            if not getattr(data, "tfds_name", "") and field in needed:
                raise ConfigError(
                    f"task.{field} has no input_path or tfds_name; set one in a --config-file "
                    "(official_configs/ has one for each experiment)."
                )
            continue
        path = data.input_path.replace(DATA_DIR_TOKEN, data_dir)
        data.input_path = path
        if not mode:
            continue
        rel = os.path.relpath(path, data_dir)
        corpus = rel.split(os.sep)[0]
        if corpus in corpora.CORPORA and not rel.startswith(".."):
            try:
                corpora.load_manifest(corpus, data_dir)
            except corpora.CorpusError as err:
                raise ConfigError(f"task.{field}.input_path: {err}") from None
        if not tf.io.gfile.glob(path):
            raise ConfigError(f"task.{field}.input_path {path!r} matches no file.")
    params.validate()
    params.lock()
    return params


def _expected_type(hint: Any) -> type | None:
    """int, float, bool or str for a field annotated so (or Optional of one), else None."""
    if isinstance(hint, type):
        return hint if hint in (int, float, bool, str) else None
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if len(args) == 1 and type(None) in typing.get_args(hint):
        return _expected_type(args[0])
    return None


def _check_types(config, where: str = "") -> None:
    """Raises a ConfigError for a field whose value is not of its annotated type.

    YAML and `a.b=value` overrides set any type (`num_layers=abc` set a string that
    failed deep inside the model builder); an int passes for a float field.
    """
    if not dataclasses.is_dataclass(config):
        return
    try:
        hints = typing.get_type_hints(type(config))
    except Exception:  # noqa: BLE001  (an unresolvable annotation: the field is not checked)
        hints = {}
    for field in dataclasses.fields(config):
        value = getattr(config, field.name, None)
        name = f"{where}.{field.name}" if where else field.name
        if dataclasses.is_dataclass(value):
            _check_types(value, name)
            continue
        if isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                _check_types(item, f"{name}[{i}]")
        expected = _expected_type(hints.get(field.name))
        if expected is None or value is None:
            continue
        ok = isinstance(value, expected) and (expected is bool or not isinstance(value, bool))
        if expected is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok:
            names = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
            raise ConfigError(f"{name} must be {names[expected]}; got {value!r}.")


def _complete_schedule(trainer) -> None:
    """Fills a learning-rate schedule's unset lengths from `trainer.train_steps`.

    The registered experiments leave them unset (Model Garden's trainer failed
    with a TypeError on None): a decay runs over all of `train_steps`, and a
    warmup over its first 10% (BERT's recipe).
    """
    optimization = trainer.optimizer_config
    schedule = optimization.learning_rate.get()
    if schedule is not None and getattr(schedule, "decay_steps", 0) is None:
        schedule.decay_steps = trainer.train_steps
    warmup = optimization.warmup.get()
    if warmup is not None and getattr(warmup, "warmup_steps", 0) is None:
        warmup.warmup_steps = max(1, trainer.train_steps // 10)


_TRAINER_STEPS = ("train_steps", "steps_per_loop", "summary_interval", "checkpoint_interval")


def _check_trainer(trainer) -> None:
    """Raises a ConfigError for step counts and intervals a run cannot use.

    A `validation_interval` of 0 is orbit's "evaluate once, at the end".
    """
    for name in _TRAINER_STEPS:
        value = getattr(trainer, name)
        if value is not None and value <= 0:
            raise ConfigError(f"trainer.{name} must be a positive int; got {value}.")
    if trainer.validation_interval is not None and trainer.validation_interval < 0:
        raise ConfigError(
            "trainer.validation_interval must be a positive int, or 0 to evaluate at the end "
            f"only; got {trainer.validation_interval}."
        )
    steps = trainer.validation_steps
    if steps is None or steps == 0 or steps < -1:
        raise ConfigError(
            "trainer.validation_steps must be a positive int, or -1 for the whole "
            f"validation set; got {trainer.validation_steps}."
        )


def _field_error(err: Exception) -> str:
    text = str(err.args[0]) if err.args else str(err)
    for old, new in LEGACY_KEYS.items():
        if f"'{old}' does not exist" in text:
            return (
                f"`{old}` is now `{new}` (the attention settings are one nested `attention` "
                "block: kind, num_heads, head_size, value_dim, shared_key_dim, "
                "mixing_initializer)."
            )
    unknown = re.search(r"The key '(\w+)' does not exist in <class '[\w.]*?(\w+)'>", text)
    if unknown:  # Model Garden adds how to extend a config, which a YAML file cannot do.
        text = f"{unknown.group(2)} has no field {unknown.group(1)!r}"
    return f"{text} (check the field names against `headsize-tf train --print-config`)."


def check_strategy(name: str, cpu_devices: int = 1, tpu: str | None = None) -> None:
    """Raises a ConfigError for strategy settings `make_strategy` cannot honour."""
    if name not in STRATEGIES:
        raise ConfigError(f"Unknown strategy {name!r}; expected one of {list(STRATEGIES)}.")
    if not 1 <= cpu_devices <= MAX_CPU_DEVICES:
        raise ConfigError(
            f"cpu_devices= must be between 1 and {MAX_CPU_DEVICES}; got {cpu_devices}."
        )
    if tpu is not None and name != "tpu":
        raise ConfigError(f"tpu= {tpu!r} is for strategy 'tpu'; got strategy {name!r}.")


def make_strategy(
    name: str, cpu_devices: int = 1, tpu: str | None = None, tpu_timeout: float = 30.0
) -> tf.distribute.Strategy:
    """A distribution strategy; `tpu` fails fast where no TPU is reachable."""
    check_strategy(name, cpu_devices, tpu)
    if cpu_devices > 1:
        split_cpu(cpu_devices)
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        gpus = tf.config.list_logical_devices("GPU")
        devices = [d.name for d in gpus] or [d.name for d in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(devices=devices)
    if name == "multi_worker_mirrored":
        if "TF_CONFIG" not in os.environ:
            raise ConfigError(
                "--strategy multi_worker_mirrored needs TF_CONFIG (cluster and task) in the "
                "environment of every worker."
            )
        return tf.distribute.MultiWorkerMirroredStrategy()
    return _tpu_strategy(tpu, tpu_timeout)


def _tpu_strategy(tpu: str | None, timeout: float) -> tf.distribute.Strategy:
    address = tpu if tpu is not None else os.environ.get("TPU_NAME", "local")
    if address.startswith("grpc://"):
        host, _, port = address[len("grpc://") :].rpartition(":")
        import socket

        try:
            socket.create_connection((host, int(port)), timeout=timeout).close()
        except OSError as err:
            raise RuntimeError(
                f"No TPU reachable at {address!r} ({err}); on Colab choose Runtime > Change "
                "runtime type > TPU, or use --strategy default|mirrored on this machine."
            ) from None
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=address)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, tf.errors.OpError, RuntimeError) as err:
        raise RuntimeError(
            f"No TPU found (tpu={address!r}): {str(err).splitlines()[0]}. On Colab choose "
            "Runtime > Change runtime type > TPU; here use --strategy default|mirrored."
        ) from None
    return tf.distribute.TPUStrategy(resolver)


def split_cpu(n: int) -> None:
    """Splits the CPU into `n` logical devices (before TF initialises devices)."""
    cpus = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(n)]
        )
    except RuntimeError as err:
        if len(tf.config.list_logical_devices("CPU")) != n:
            raise ConfigError(
                f"Cannot split the CPU into {n} devices after TensorFlow initialised them ({err})."
            ) from None


def _build_optimizer_slots(optimizer, variables) -> None:
    """Creates the optimizer's slot variables now, under the trainer's strategy scope.

    Model Garden's optimizers create their slots in the first `apply_gradients`, inside
    the traced training loop; a `tf.function` whose first call creates variables is
    traced twice, so every run paid for two traces of its training loop (a fifth of
    a short run's time). Variables without gradients get slots too (zeros, never
    updated); restoring a checkpoint written without them leaves them at zero, which
    is what they hold anyway.
    """
    import tf_keras

    if isinstance(optimizer, tf_keras.optimizers.legacy.Optimizer):
        # What `apply_gradients` calls; wrappers (loss scaling, EMA) delegate it.
        optimizer._create_all_weights(variables)
    elif isinstance(optimizer, tf_keras.optimizers.Optimizer):
        optimizer.build(variables)


class _ReadWeightsCheckpoint(tf.train.Checkpoint):
    """A checkpoint of a `model` and more whose restores may leave saved values unread
    (the optimizer's slots, the input iterator) and values missing (the step and the
    optimizer of a model_dir that `save_model_dir` wrote), but read every existing
    weight of the model."""

    def restore(self, save_path, options=None):
        status = super().restore(save_path, options).expect_partial()
        weights = tf.train.Checkpoint(model=self.model).read(save_path).expect_partial()
        try:
            weights.assert_existing_objects_matched()
        except AssertionError as err:
            found = re.search(r"Found (\d+) Python objects", str(err))
            unread = f"{found.group(1)} of the model's objects" if found else "some weights"
            raise CheckpointError(
                f"{save_path} does not hold this model's weights ({unread} found no value)."
            ) from None
        return status


def _resumable_trainer_cls():
    from official.core import base_trainer

    class ResumableTrainer(base_trainer.Trainer):
        """Model Garden's trainer that also checkpoints the training-data iterator.

        A run killed and restarted then continues with the batches it would
        have seen, so it ends with the same weights as an uninterrupted run
        (with deterministic ops and a seeded input pipeline). Distributed
        iterators (mirrored, multi-worker, TPU strategies) are not trackable in
        TF 2.20, and TFDS pipelines may hold unsaveable stateful ops; with those
        the stock behaviour is kept and a resumed run restarts its input
        pipeline (a warning says so).
        """

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            from absl import logging

            dataset = getattr(self, "_train_dataset", None)  # Absent in eval-only runs.
            if dataset is None:
                # An evaluation reads the weights only: the optimizer's slots and the
                # input iterator stay in the checkpoint, unread, without TensorFlow's
                # warnings about them (a page of lines at exit).
                self._checkpoint = _ReadWeightsCheckpoint(
                    global_step=self.global_step,
                    model=self.model,
                    optimizer=self.optimizer,
                    **getattr(self.model, "checkpoint_items", {}),
                )
                return
            _build_optimizer_slots(self.optimizer, self.model.trainable_variables)
            if getattr(self.config.task.train_data, "tfds_name", ""):
                # TFDS pipelines may hold stateful ops (PyFunc) that cannot be saved.
                logging.warning("TFDS input: a resumed run restarts its input pipeline.")
                return
            iterator = tf.nest.map_structure(iter, dataset)
            if not isinstance(iterator, tf.__internal__.tracking.Trackable):
                logging.warning(
                    "The %s input iterator cannot be checkpointed: a resumed run restarts "
                    "its input pipeline.",
                    type(iterator).__name__,
                )
                return
            self._train_iter = iterator
            items = getattr(self.model, "checkpoint_items", {})
            self._checkpoint = tf.train.Checkpoint(
                global_step=self.global_step,
                model=self.model,
                optimizer=self.optimizer,
                train_iterator=self._train_iter,
                **items,
            )

        last_eval_logs = None

        # The steps run without autograph, as Keras 3's trainer marks its own: Model
        # Garden's tasks, layers and optimizers and ours have no tensor-dependent Python
        # control flow, and converting every function a step calls cost seconds per
        # process (orbit's loop around the steps keeps its autograph; with
        # `runtime.enable_xla` on GPUs Model Garden traces the task's step in a
        # `tf.function` of its own, which converts again). A model or task registered
        # by a user runs unconverted here too: branch on tensors with `tf.cond`.
        @tf.autograph.experimental.do_not_convert
        def train_step(self, iterator):
            return super().train_step(iterator)

        @tf.autograph.experimental.do_not_convert
        def eval_step(self, iterator):
            return super().eval_step(iterator)

        def evaluate(self, num_steps):
            # Kept: `run` reports the last evaluation instead of evaluating the same
            # weights again (Model Garden's `run_post_eval`).
            self.last_eval_logs = super().evaluate(num_steps)
            return self.last_eval_logs

    return ResumableTrainer


@dataclasses.dataclass
class TrainResult:
    model_dir: str
    metrics: dict[str, float]
    params: Any
    num_replicas: int = 1
    weights_sha256: str = ""


def run(
    experiment: str,
    model_dir: str,
    config_files: Sequence[str] = (),
    params_override: str | dict | None = None,
    mode: str = "train_and_eval",
    strategy: str = "default",
    cpu_devices: int = 1,
    data_dir: str | None = None,
    tpu: str | None = None,
    seed: int | None = 0,
    untrained_eval: bool = True,
) -> TrainResult:
    """Trains / evaluates an experiment; returns the last eval metrics.

    A model_dir with a checkpoint resumes only the experiment and `task.model` it
    was trained with (a ConfigError names the first field that differs; dropout
    rates and initializers may change). Mode "eval" on a model_dir without a
    checkpoint evaluates `task.init_checkpoint`, or else the initial weights (a
    baseline) unless `untrained_eval` is False (the CLI: a likely wrong
    --model-dir). `seed` seeds Python, NumPy and TF (None leaves them unseeded; a seed is
    required when TF_DETERMINISTIC_OPS is on).
    """
    from official.core import task_factory, train_lib, train_utils
    from official.modeling import performance

    if mode not in MODES:
        raise ConfigError(f"Unknown mode {mode!r}; expected one of {list(MODES)}.")
    if not model_dir:
        raise ConfigError("model_dir= is required.")
    check_strategy(strategy, cpu_devices, tpu)
    params = build_params(experiment, config_files, params_override, data_dir, mode)
    _check_model_dir(model_dir, experiment, params)
    if (
        mode == "eval"
        and not untrained_eval
        and not params.task.init_checkpoint
        and not has_checkpoint(model_dir)
    ):
        raise ConfigError(
            f"mode='eval' needs a trained model_dir= or a task.init_checkpoint; {model_dir} "
            "holds no checkpoint."
        )
    dist = make_strategy(strategy, cpu_devices, tpu)
    if seed is not None:
        import tf_keras

        tf_keras.utils.set_random_seed(seed)
    if params.runtime.mixed_precision_dtype:
        performance.set_mixed_precision_policy(params.runtime.mixed_precision_dtype)
    with dist.scope():
        task = task_factory.get_task(params.task, logging_dir=model_dir)
        trainer = train_utils.create_trainer(
            params,
            task,
            train="train" in mode,
            evaluate="eval" in mode,
            trainer_cls=_resumable_trainer_cls(),
        )
    if "train" in mode:
        train_utils.serialize_config(params, model_dir)
        from headsize_tf.core.io import write_json

        write_json(os.path.join(model_dir, EXPERIMENT_FILE), {"experiment": experiment})
    # No post-training evaluation: "train_and_eval" evaluates after its last step and
    # "eval" once, and the metrics are those (Model Garden's `run_post_eval` evaluated
    # the same weights a second time). A finished run trained again evaluates once here.
    for run_mode in (mode, "eval"):
        model, _ = train_lib.run_experiment(
            distribution_strategy=dist,
            task=task,
            mode=run_mode,
            params=params,
            model_dir=model_dir,
            run_post_eval=False,
            trainer=trainer,
        )
        logs = getattr(trainer, "last_eval_logs", None)
        if "eval" not in mode or logs is not None:
            break
    metrics = {k: float(v) for k, v in (logs or {}).items() if _is_scalar(v)}
    return TrainResult(
        model_dir=model_dir,
        metrics=metrics,
        params=params,
        num_replicas=dist.num_replicas_in_sync,
        weights_sha256=weights_digest(model),
    )


def has_checkpoint(model_dir: str | os.PathLike) -> bool:
    """Whether `model_dir` is a directory holding a checkpoint."""
    return os.path.isdir(model_dir) and tf.train.latest_checkpoint(model_dir) is not None


def _check_model_dir(model_dir: str, experiment: str, params) -> None:
    """Raises a ConfigError before a run would spoil `model_dir`.

    A model_dir with a checkpoint resumes only the experiment and model it was
    trained with: another one would rewrite params.yaml before the restore
    failed, or train a new model on top of the old files (the trainer settings,
    such as train_steps or the learning rate, may change).
    """
    from official.modeling import hyperparams

    if not has_checkpoint(model_dir):
        if os.path.exists(model_dir) and not os.path.isdir(model_dir):
            raise ConfigError(f"model_dir {model_dir} is a file; expected a directory.")
        return
    saved_yaml = os.path.join(model_dir, "params.yaml")
    if not os.path.exists(os.path.join(model_dir, EXPERIMENT_FILE)) or not os.path.exists(
        saved_yaml
    ):
        raise ConfigError(
            f"{model_dir} holds a checkpoint but no {EXPERIMENT_FILE} and params.yaml: "
            "not a `headsize-tf train` model_dir; use another --model-dir."
        )
    saved = experiment_of(model_dir)
    if saved != experiment:
        raise ConfigError(
            f"{model_dir} was trained as {saved}, not {experiment}; use another --model-dir."
        )
    from official.core import exp_factory

    try:
        old = exp_factory.get_exp_config(saved)
        old = hyperparams.override_params_dict(old, saved_yaml, is_strict=True)
    except (KeyError, ValueError, AttributeError) as err:
        raise ConfigError(f"{saved_yaml}: {_field_error(err)}") from None
    was, now = flat_fields(old.task.model.as_dict()), flat_fields(params.task.model.as_dict())
    for key in sorted(set(was) | set(now)):
        if was.get(key) != now.get(key) and not key.endswith(_RESUME_MAY_CHANGE):
            raise ConfigError(
                f"{model_dir} was trained with task.model.{key}={was.get(key)!r}, not "
                f"{now.get(key)!r}; a run resumes the model it was trained with (use another "
                "--model-dir)."
            )


# Fields of `task.model` a resumed run may change: they shape no weight.
_RESUME_MAY_CHANGE = ("dropout_rate", "initializer_range", "dropout")


def flat_fields(value: Any, prefix: str = "") -> dict[str, Any]:
    """A nested dict's leaves by dotted key (`{"a": {"b": 1}}` -> `{"a.b": 1}`)."""
    if isinstance(value, Mapping) and value:
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(flat_fields(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def weights_digest(model) -> str:
    """SHA-256 of all model weights in order: equal on workers that agree bit for bit."""
    import hashlib

    digest = hashlib.sha256()
    for weight in model.weights:
        digest.update(weight.name.encode())
        digest.update(weight.numpy().tobytes())
    return digest.hexdigest()


def _is_scalar(value: Any) -> bool:
    try:
        float(value)
        return True
    except (TypeError, ValueError):
        return False


def experiment_of(model_dir: str | os.PathLike) -> str:
    """The registered experiment a `run` model_dir was trained with."""
    import json

    path = os.path.join(model_dir, EXPERIMENT_FILE)
    if not os.path.exists(path):
        raise ConfigError(
            f"{model_dir} is not a `headsize-tf train` model_dir: it has no {EXPERIMENT_FILE}."
        )
    with open(path) as f:
        return json.load(f)["experiment"]


def build_heads(model) -> None:
    """Creates the variables a Model Garden model builds lazily (BertPretrainerV2's
    masked-LM head) by calling it on its own symbolic inputs, so that every weight exists
    before a checkpoint is read or weights are copied."""
    inputs = getattr(model, "inputs", None)
    if inputs is not None:
        model(inputs)


def load_trained_model(model_dir: str):
    """(params, model) of a finished `run`: config from the model_dir, latest weights.

    The model_dir must hold `params.yaml`, `headsize_experiment.json` (both
    written by `run`) and a checkpoint.
    """
    from official.core import exp_factory, task_factory
    from official.modeling import hyperparams

    from headsize_tf import tasks  # noqa: F401  (registers the task classes)
    from headsize_tf.configs import experiments  # noqa: F401  (registers experiments)

    names = {p: os.path.join(model_dir, p) for p in ("params.yaml", EXPERIMENT_FILE)}
    missing = [p for p, path in names.items() if not os.path.exists(path)]
    if missing:
        raise ConfigError(
            f"{model_dir} is not a `headsize-tf train` model_dir: it has no {missing}."
        )
    params = exp_factory.get_exp_config(experiment_of(model_dir))
    params = hyperparams.override_params_dict(params, names["params.yaml"], is_strict=True)
    latest = tf.train.latest_checkpoint(model_dir)
    if latest is None:
        raise ConfigError(f"{model_dir} holds no checkpoint.")
    task = task_factory.get_task(params.task)
    model = task.build_model()
    build_heads(model)
    status = tf.train.Checkpoint(model=model).read(latest)
    status.expect_partial().assert_existing_objects_matched()
    return params, model
