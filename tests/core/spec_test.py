"""The framework-neutral core: AttentionSpec rules, pruning plans, no TensorFlow."""

import subprocess
import sys

import numpy as np
import pytest

from headsize_tf.core import AttentionSpec, SpecError
from headsize_tf.core.spec import migrate_legacy_config


def test_resolve_rules_of_each_kind():
    assert AttentionSpec("standard", 8).resolve(64).head_size == 8
    assert AttentionSpec("fixed_head", 8, head_size=32).resolve(64).head_size == 32
    collab = AttentionSpec("collaborative", 4, shared_key_dim=24)
    assert collab.resolve(64).head_size == 16
    assert collab.resolve(64).shared_key_dim == 24
    resolved = AttentionSpec("fixed_head", 2, head_size=8, value_dim=5).resolve(16)
    assert (resolved.head_size, resolved.value_dim) == (8, 5)


def test_sequence_length_resolves_from_the_models_length_only():
    spec = AttentionSpec("fixed_head", 2, head_size="sequence_length")
    assert spec.resolve(16, sequence_length=12).head_size == 12
    assert spec.with_sequence_length(12).head_size == 12
    with pytest.raises(SpecError, match="needs a sequence length"):
        spec.resolve(16)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"kind": "fixed"}, r"Unknown attention kind 'fixed'; expected one of"),
        ({"kind": "standard", "num_heads": 0}, r"`num_heads` must be a positive integer; got 0"),
        ({"kind": "standard", "head_size": 3}, r"head_size=3 is only for kind 'fixed_head'"),
        ({"kind": "fixed_head"}, r"fixed_head attention needs `head_size`"),
        ({"kind": "fixed_head", "head_size": "seq"}, r"positive int or \"sequence_length\""),
        ({"kind": "collaborative"}, r"needs `shared_key_dim`"),
        ({"kind": "standard", "shared_key_dim": 8}, r"shared_key_dim=8 is only for kind"),
        ({"kind": "fixed_head", "head_size": 4, "value_dim": -1}, r"`value_dim` must be"),
        (
            {"kind": "fixed_head", "num_heads": [2, 3], "head_size": [4, 4, 4]},
            r"different lengths",
        ),
    ],
)
def test_bad_specs_name_the_value(kwargs, message):
    with pytest.raises(SpecError, match=message):
        AttentionSpec(**kwargs)


def test_width_not_divisible_is_a_clear_error():
    with pytest.raises(SpecError, match=r"width \(10\) is not a multiple of num_heads \(4\)"):
        AttentionSpec("standard", 4).resolve(10)


def test_per_layer_lists():
    spec = AttentionSpec("fixed_head", num_heads=[2, 4, 8], head_size=[16, 32, "sequence_length"])
    layers = spec.with_sequence_length(64).layers(3)
    assert [(s.num_heads, s.head_size) for s in layers] == [(2, 16), (4, 32), (8, 64)]
    with pytest.raises(SpecError, match="3 entries, but the model has 2 layers"):
        spec.layers(2)
    with pytest.raises(SpecError, match="call for_layer"):
        spec.resolve(64)
    assert AttentionSpec.from_dict(spec.to_dict()) == spec


def test_dict_round_trip_and_legacy_keys():
    spec = AttentionSpec("collaborative", 4, head_size=8, shared_key_dim=16, value_dim=6)
    assert AttentionSpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(SpecError, match=r"`attention_type` is now `attention.kind`"):
        AttentionSpec.from_dict({"attention_type": "standard"})
    old = {
        "hidden_size": 8,
        "attention_type": "standard",
        "num_attention_heads": 2,
        "head_size": 4,
        "shared_key_dim": None,
    }
    new = migrate_legacy_config(old)
    assert new == {"hidden_size": 8, "attention": AttentionSpec("standard", 2).to_dict()}


def test_layer_kwargs():
    assert AttentionSpec("fixed_head", 3, head_size=5, value_dim=2).layer_kwargs() == {
        "num_heads": 3,
        "head_size": 5,
        "value_dim": 2,
    }
    assert AttentionSpec("standard", 3).layer_kwargs() == {"num_heads": 3}


def test_core_imports_no_framework():
    code = (
        "import sys, headsize_tf.core, headsize_tf.core.params, headsize_tf.core.cp, "
        "headsize_tf.core.pruning_plan, headsize_tf.core.io, headsize_tf.core.validation; "
        "bad = [m for m in ('tensorflow', 'tf_keras', 'keras', 'official') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_one_positive_integer_test_for_specs_configs_and_search_spaces():
    from headsize_tf.core.spec import is_positive_int

    for value in (1, 7, np.int64(3), np.int32(1)):
        assert is_positive_int(value), value
    for value in (0, -2, True, False, 1.0, np.float32(2), "3", None, np.int64(0)):
        assert not is_positive_int(value), value


def test_a_numpy_array_is_a_per_layer_list():
    spec = AttentionSpec("fixed_head", num_heads=np.array([4, 2]), head_size=np.array([8, 16]))
    assert spec == AttentionSpec("fixed_head", num_heads=(4, 2), head_size=(8, 16))
    with pytest.raises(SpecError, match=r"`num_heads\[1\]` must be a positive integer; got 0"):
        AttentionSpec("standard", num_heads=np.array([4, 0]))


def test_a_spec_with_rope_scaling_hashes_as_it_compares():
    scaling = {"rope_type": "linear", "factor": 2.0}
    one = AttentionSpec("standard", num_heads=4, rope_max_wavelength=1e4, rope_scaling=scaling)
    two = AttentionSpec("standard", num_heads=4, rope_max_wavelength=1e4, rope_scaling=scaling)
    other = AttentionSpec("standard", num_heads=4, rope_max_wavelength=1e4)
    assert one == two and hash(one) == hash(two) and len({one, two, other}) == 2
