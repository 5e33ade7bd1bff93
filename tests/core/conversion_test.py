"""core.conversion.ConversionTarget: validation, the converted spec, one driver for every kind."""

from __future__ import annotations

import numpy as np
import pytest

from headsize_tf.core.conversion import ConversionTarget
from headsize_tf.core.spec import AttentionSpec, SpecError
from tests import kv_oracle

STANDARD = AttentionSpec("standard", num_heads=8).resolve(64)
FOUR = AttentionSpec("standard", num_heads=4).resolve(64)


def test_specs_of_each_kind():
    assert ConversionTarget("grouped", 2).spec([STANDARD, STANDARD]) == AttentionSpec(
        "grouped", num_heads=8, head_size=8, num_kv_heads=2
    )
    latent = ConversionTarget("latent", [16, 8]).spec([STANDARD, FOUR], width=64)
    assert latent.kv_latent_dim == (16, 8) and latent.num_heads == (8, 4)
    assert latent.head_size == (8, 16)
    assert ConversionTarget("collaborative", 32).spec([STANDARD]).shared_key_dim == 32


def test_value_sizes_other_than_the_head_size_are_kept():
    layer = AttentionSpec("fixed_head", num_heads=4, head_size=8, value_dim=6).resolve(32)
    assert ConversionTarget("grouped", 2).spec([layer, layer]).value_dim == 6


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: ConversionTarget("grouped", 3).spec([STANDARD]), "num_kv_heads=3 does not divide"),
        (lambda: ConversionTarget("latent", 0), "`kv_latent_dim` must be a positive integer"),
        (
            lambda: ConversionTarget("latent", 65).spec([STANDARD], width=64),
            r"kv_latent_dim=65 is outside \[1, 64\]",
        ),
        (lambda: ConversionTarget("collaborative", 65).spec([STANDARD]), "above the full rank"),
        (lambda: ConversionTarget("pruned", 2), "Unknown conversion target 'pruned'"),
        (lambda: ConversionTarget("grouped", 2, "median"), "Unknown grouped method 'median'"),
        (lambda: ConversionTarget("grouped", [2]).spec([STANDARD] * 2), "has 1 entries"),
        (
            lambda: ConversionTarget("collaborative", 4).spec(
                [AttentionSpec("grouped", num_heads=8, num_kv_heads=2).resolve(64)]
            ),
            "Layer 0 has grouped attention",
        ),
        (
            lambda: ConversionTarget("collaborative", [8, 16]).spec([STANDARD] * 2),
            "one value for every layer",
        ),
    ],
)
def test_bad_targets_name_the_value(make, message):
    with pytest.raises(SpecError, match=message):
        make()


@pytest.mark.parametrize("kind, size", [("grouped", 4), ("latent", 16), ("collaborative", 16)])
def test_convert_layer_is_exact_at_full_size(kind, size):
    rng = np.random.default_rng(0)
    w = kv_oracle.random_mha_weights(rng, width=16, heads=4, head_size=4)
    converted, report = ConversionTarget(kind, size).convert_layer(w, 0, name="layer_0")
    assert report["layer"] == "layer_0" if kind != "collaborative" else report["name"] == "layer_0"
    x, y = rng.normal(size=(2, 3, 16)), rng.normal(size=(2, 5, 16))
    if kind == "collaborative":
        assert report["relative_error"] < 1e-5
        return
    oracle = kv_oracle.grouped if kind == "grouped" else kv_oracle.latent
    np.testing.assert_allclose(oracle(converted, x, y), kv_oracle.mha(w, x, y), atol=1e-5)


def test_to_dict_names_the_size():
    assert ConversionTarget("latent", [4, 2]).to_dict() == {
        "kind": "latent",
        "kv_latent_dim": [4, 2],
        "method": "joint_svd",
    }


def test_layers_with_different_rope_take_the_models_own_or_are_refused():
    """Gemma 3's local and global layers differ in RoPE base: the converted spec takes the
    model's own (the model sets its local layers' itself); without it, an error."""
    from headsize_tf.core.spec import ResolvedAttention

    def layer(base):
        sets = ((0, 1, 2, 3),) * 2
        return ResolvedAttention(
            "grouped", 4, 8, 8, num_kv_heads=2, rope_max_wavelength=base, rope_sets=sets
        )

    layers = [layer(1e4), layer(1e6)]
    target = ConversionTarget("grouped", 1, "mean")
    with pytest.raises(SpecError, match="RoPE bases or scalings differ"):
        target.spec(layers)
    spec = target.spec(layers, rope=(1e6, {"rope_type": "linear", "factor": 8.0}))
    assert spec.rope_max_wavelength == 1e6 and spec.rope_scaling["factor"] == 8.0
    assert target.spec([layer(1e4)] * 2).rope_max_wavelength == 1e4
