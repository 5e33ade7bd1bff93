"""The tuner's search space: per-layer head counts and head sizes."""

import keras_tuner
import pytest

from headsize_tf import params
from headsize_tf.core.search_space import SearchSpace, SearchSpaceError

DEFAULTS = {
    "attention_type": "standard",
    "num_heads": 4,
    "head_size": None,
    "shared_key_dim": None,
    "width": 64,
    "num_layers": 3,
}


def test_per_layer_heads_and_sizes_are_one_hyperparameter_per_layer():
    space = SearchSpace.from_dict(
        {
            "attention_type": ["fixed_head"],
            "num_heads_per_layer": [1, 2, 4],
            "head_size_per_layer": [8, 32],
        }
    )
    hp = keras_tuner.HyperParameters()
    first = space.declare(hp, DEFAULTS)
    assert first["num_heads"] == [1, 1, 1] and first["head_size"] == [8, 8, 8]
    assert {f"num_heads_layer_{i}" for i in range(3)} <= set(hp.values)
    assert {f"head_size_layer_{i}" for i in range(3)} <= set(hp.values)
    hp.values.update(num_heads_layer_1=4, num_heads_layer_2=2, head_size_layer_0=32)
    config = space.declare(hp, DEFAULTS)
    assert config["num_heads"] == [1, 4, 2] and config["head_size"] == [32, 8, 8]
    # The parameter formula takes the per-layer form: each layer's Q, K, V, O.
    spec = params.AttentionSpec(
        "fixed_head", num_heads=config["num_heads"], head_size=config["head_size"]
    )
    counts = [params.attention_params(spec.for_layer(i), 64).trainable for i in range(3)]
    assert counts == [4 * 64 * h * p + 3 * h * p + 64 for h, p in [(1, 32), (4, 8), (2, 8)]]


@pytest.mark.parametrize(
    "space, message",
    [
        ({"num_heads": [2], "num_heads_per_layer": [2]}, "give num_heads_per_layer or num_heads"),
        ({"num_layers": [2, 3], "head_size_per_layer": [8]}, "needs a fixed number of layers"),
        ({"num_heads_per_layer": []}, "empty list of choices"),
    ],
)
def test_bad_per_layer_spaces(space, message):
    with pytest.raises(SearchSpaceError, match=message):
        SearchSpace.from_dict(space)
