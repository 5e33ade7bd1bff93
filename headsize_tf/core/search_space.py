"""A search space over attention kind, heads, head size and shared key dim.

Framework-neutral (pure Python + YAML): the tf_keras tuner
(`headsize_tf.tuning`) and the Keras 3 `HyperModel`
(`headsize_tf.keras3.tuning`) declare their hyperparameters through
`SearchSpace.declare`, which only calls the `hp` object's `Choice`, `Int` and
`conditional_scope` methods (a `keras_tuner.HyperParameters`).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Mapping
from typing import Any

import yaml

from headsize_tf.core.spec import KINDS, is_positive_int

HYPERPARAMETERS = (
    "attention_type",
    "num_heads",
    "head_size",
    "shared_key_dim",
    "width",
    "num_layers",
    "num_heads_per_layer",
    "head_size_per_layer",
)
# Searched layer by layer (one hyperparameter per layer, `num_heads_layer_0`, ...): the
# trial's `num_heads` / `head_size` is then a per-layer list (the spec's per-layer form).
PER_LAYER = {"num_heads_per_layer": "num_heads", "head_size_per_layer": "head_size"}
TUNERS = ("random", "bayesian", "hyperband")
# Config field of each hyperparameter (under task.model or task.model.encoder.any);
# the attention ones set the model's attention spec.
FIELDS = {
    "attention_type": "attention.kind",
    "num_heads": "attention.num_heads",
    "head_size": "attention.head_size",
    "shared_key_dim": "attention.shared_key_dim",
    "width": "hidden_size",
    "num_layers": "num_layers",
}


class SearchSpaceError(ValueError):
    """A search space that is empty, unknown, or cannot fit the budget."""


@dataclasses.dataclass(frozen=True)
class SearchSpace:
    """Hyperparameter name -> list of choices, or {min, max, step} for ints."""

    values: dict[str, Any]

    @classmethod
    def from_yaml(cls, path: str | os.PathLike) -> SearchSpace:
        try:
            data = yaml.safe_load(pathlib.Path(path).read_text())
        except FileNotFoundError:
            raise SearchSpaceError(f"Search space file {str(path)!r} does not exist.") from None
        return cls.from_dict(data, source=str(path))

    @classmethod
    def from_dict(cls, data: Any, source: str = "search space") -> SearchSpace:
        if not data:
            raise SearchSpaceError(
                f"{source} is empty; give at least one of {list(HYPERPARAMETERS)}."
            )
        if not isinstance(data, Mapping):
            raise SearchSpaceError(f"{source} must map hyperparameter names to choices.")
        unknown = sorted(set(data) - set(HYPERPARAMETERS))
        if unknown:
            raise SearchSpaceError(
                f"{source}: unknown hyperparameter(s) {unknown}; expected some of "
                f"{list(HYPERPARAMETERS)}."
            )
        for name, uniform in PER_LAYER.items():
            if name in data and uniform in data:
                raise SearchSpaceError(f"{source}: give {name} or {uniform}, not both.")
            if name in data and "num_layers" in data:
                raise SearchSpaceError(
                    f"{source}: {name} needs a fixed number of layers; drop num_layers from the "
                    "search space."
                )
        for name, spec in data.items():
            if isinstance(spec, list):
                if not spec:
                    raise SearchSpaceError(f"{source}: {name} has an empty list of choices.")
            elif isinstance(spec, Mapping):
                if set(spec) - {"min", "max", "step"} or not {"min", "max"} <= set(spec):
                    raise SearchSpaceError(
                        f"{source}: {name} must be a list of choices or {{min, max[, step]}}; "
                        f"got {dict(spec)}."
                    )
                if name == "attention_type":
                    raise SearchSpaceError(f"{source}: attention_type must be a list of choices.")
            else:
                raise SearchSpaceError(
                    f"{source}: {name} must be a list of choices or {{min, max[, step]}}; got "
                    f"{spec!r}."
                )
        space = cls(dict(data))
        check_space(space, source)
        return space

    def choices(self, name: str) -> list:
        spec = self.values[name]
        if isinstance(spec, list):
            return list(spec)
        return list(range(spec["min"], spec["max"] + 1, spec.get("step", 1)))

    def _declare(self, hp: Any, name: str, spec: Any) -> Any:
        if isinstance(spec, list):
            return hp.Choice(name, spec)
        return hp.Int(name, spec["min"], spec["max"], step=spec.get("step", 1))

    def _value(self, hp: Any, name: str, defaults: Mapping[str, Any]) -> Any:
        per_layer = next((k for k, v in PER_LAYER.items() if v == name), None)
        if per_layer in self.values:
            layers = int(defaults.get("num_layers") or 0)
            if layers <= 0:
                raise SearchSpaceError(f"{per_layer} needs the model's num_layers.")
            return [
                self._declare(hp, f"{name}_layer_{i}", self.values[per_layer])
                for i in range(layers)
            ]
        if name not in self.values:
            return defaults.get(name)
        return self._declare(hp, name, self.values[name])

    def declare(self, hp: Any, defaults: Mapping[str, Any]) -> dict[str, Any]:
        """A trial's settings `{hyperparameter: value}`, declaring them on `hp`.

        `head_size` is active only for fixed_head and `shared_key_dim` only
        for collaborative attention (conditional scopes); settings outside the
        space come from `defaults`.
        """
        attention_type = self._value(hp, "attention_type", defaults)
        config = {"attention_type": attention_type}
        for name in ("num_heads", "width", "num_layers"):
            config[name] = self._value(hp, name, defaults)
        config["head_size"] = None
        config["shared_key_dim"] = None
        if "attention_type" in self.values:
            if "head_size" in self.values or "head_size_per_layer" in self.values:
                with hp.conditional_scope("attention_type", ["fixed_head"]):
                    if attention_type == "fixed_head":
                        config["head_size"] = self._value(hp, "head_size", defaults)
            if "shared_key_dim" in self.values:
                with hp.conditional_scope("attention_type", ["collaborative"]):
                    if attention_type == "collaborative":
                        config["shared_key_dim"] = self._value(hp, "shared_key_dim", defaults)
        else:
            config["head_size"] = self._value(hp, "head_size", defaults)
            config["shared_key_dim"] = self._value(hp, "shared_key_dim", defaults)
        if config["attention_type"] == "fixed_head" and config["head_size"] is None:
            config["head_size"] = defaults.get("head_size") or 32
        if config["attention_type"] == "collaborative" and config["shared_key_dim"] is None:
            config["shared_key_dim"] = defaults.get("shared_key_dim") or config["width"]
        if config["attention_type"] != "fixed_head":
            config["head_size"] = None
        return config


def check_space(space: SearchSpace, source: str = "search space") -> None:
    """Raises SearchSpaceError for a choice or range the model cannot take.

    `attention_type` choices are attention kinds; every other hyperparameter
    (heads, head size, shared key dim, width, layers) takes positive integers,
    as choices or as a range whose `min`, `max` and `step` are positive
    integers with `min <= max`.
    """
    for name, spec in space.values.items():
        if name == "attention_type":
            for value in spec:
                if not isinstance(value, str) or value not in KINDS:
                    raise SearchSpaceError(
                        f"{source}: attention_type choice {value!r} is not an attention kind; "
                        f"expected some of {list(KINDS)}."
                    )
        elif isinstance(spec, list):
            for value in spec:
                if not is_positive_int(value):
                    raise SearchSpaceError(
                        f"{source}: {name} choice {value!r} is not a positive integer."
                    )
        else:
            for key in ("min", "max", "step"):
                value = spec.get(key, 1)
                if not is_positive_int(value):
                    raise SearchSpaceError(
                        f"{source}: {name} {key} must be a positive integer; got {value!r}."
                    )
            if spec["min"] > spec["max"]:
                raise SearchSpaceError(
                    f"{source}: {name} min {spec['min']} is greater than its max {spec['max']}."
                )
