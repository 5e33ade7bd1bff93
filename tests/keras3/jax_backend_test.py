"""Runs tests/keras3 again on the JAX backend, in a subprocess."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import keras
import pytest

GUARD = "HEADSIZE_KERAS3_SUBPROCESS"
# What must hold on every backend, where the code runs differently on JAX: the layers
# against the numpy oracles, cached decoding (a `jax.jit` loop on JAX), rotary positions,
# the shared-K/V layers and the conversions that build them, fit / bfloat16, saving,
# quantization and LoRA, the gate gradients of importance, and the Hugging Face and
# keras-hub imports. One case stands for several where the cases differ only in
# backend-neutral code (spec validation, numpy properties, error messages, which
# attention kind or checkpoint family); those run on TensorFlow only, as do the MiniLM
# comparison, the tuner search and the CLI. Notebook 07 trains on JAX as well.
# Three groups, one subprocess each (tests/conftest.py makes each its own work unit): the
# layers' numerics, the rotary layers' oracle and cached decoding run in the default run;
# the models, the other rotary checks, the conversions to shared K/V, the layer contract,
# training and cross-framework checks in the full run (docs/testing.md), which runs every
# group. (The default run also converts and prunes on JAX in no_tensorflow_test.py.)
JAX_GROUPS = {
    "models": [
        "modeling/causal_lm",
        "layers/quantize_lora",
        "pretrained/hf_import",
        "hub/keras_hub::test_gpt2_imports_with_equal_lm_logits",
        "modeling/model_options::test_lm_padding_mask_hides_padded_keys",
        "modeling/decoder_lm",
        "pretrained/hub_decoders",
    ],
    "layers": [
        "layers/layers",
        "layers/per_head_mask",
        "layers/shared_kv",
        # The rotary layers against their numpy oracle, decoding cached (the rest of the
        # file: the full run).
        "layers/rope::test_rotary_layers_match_the_numpy_oracle_and_decode_cached",
    ],
    "tools": [
        "reparam/kv_convert",
        "layers/rope",
        "layers/layer_contract",
        "layers/training",
        "layers/cross_framework",
        "reparam/kv_compress",
    ],
}
SLOW_GROUPS = ("models", "tools")
# Within the models group, the model-level cases of the other attention kinds (their layers
# run on JAX in the other group) and argument checks, which run the same on every backend.
JAX_GROUP_FILTERS = {
    "models": "not fixed_head and not collaborative and not bad_arguments and not refused "
    "and not parameter_count and not oracle_sees and not resolves_to and not check_their",
    # Configs, initializers and the spec -> class table are backend-neutral.
    # So are a cache's byte count (array sizes) and the up-projections' stored layout.
    "layers": "not mixing_initializers and not sequence_length_head_size and not make_attention "
    "and not cache_holds_exactly_the_formulas_bytes and not rank_first_stores_load",
    "tools": "not config_round_trip and not rotary_layers_match_the_numpy_oracle",
}
JAX_DESELECT = [
    # The same Keras quantization the quantize_lora file runs on JAX.
    "tests/keras3/modeling/decoder_lm_test.py::test_int8_quantized_logits_stay_close",
    "tests/keras3/modeling/causal_lm_test.py::test_a_quantized_model_dequantizes_its_tied_output_table",
    "tests/keras3/modeling/decoder_lm_test.py::test_generate_past_max_sequence_length_is_a_one_line_error",
    # Rotary numerics already checked on JAX by the rotary layers' oracles and cached decoding;
    # these compare numpy tables, keras-hub's layer (run on TensorFlow) and spec validation.
    "tests/keras3/layers/rope_test.py::test_rotary_scores_depend_on_the_position_difference_only",
    "tests/keras3/layers/rope_test.py::test_rotation_equals_keras_hubs_rotary_embedding",
    "tests/keras3/layers/rope_test.py::test_llama3_frequencies_equal_keras_hubs",
    "tests/keras3/layers/rope_test.py::test_rotary_specs_refuse_bad_settings_in_one_line",
    # numpy and spec checks of the conversion core; its JAX models: the rotated and
    # full-budget exactness tests and the cut conversions.
    "tests/keras3/reparam/kv_compress_test.py::"
    "test_a_calibrated_latent_keeps_the_activations_better_than_a_weight_svd",
    "tests/keras3/reparam/kv_compress_test.py::test_pair_strategies_and_energy_allocation",
    "tests/keras3/reparam/kv_compress_test.py::"
    "test_every_pair_kept_at_full_rank_is_the_source_and_decodes_alike",
    "tests/keras3/reparam/kv_compress_test.py::"
    "test_energy_allocation_keeps_the_total_and_budgets_are_checked",
    # The split SVD and the per-layer grouped budget are numpy; their layers run on JAX above.
    "tests/keras3/reparam/kv_compress_test.py::"
    "test_a_split_svd_latent_is_exact_at_its_limit_and_cuts_to_a_budget",
    "tests/keras3/reparam/kv_compress_test.py::"
    "test_grouped_heads_per_layer_meet_a_cache_budget_where_pooling_costs_most",
    # The checkpoint families differ in their readers (numpy), not in the model.
    "tests/keras3/pretrained/hub_decoders_test.py::test_unsupported_families_are_refused_with_what_they_need",
    "tests/keras3/pretrained/hub_decoders_test.py::test_models_a_llama_checkpoint_cannot_hold_are_refused",
    "tests/keras3/pretrained/hub_decoders_test.py::"
    "test_hub_decoder_loads_with_equal_logits_and_saves_back[llama3_untied]",
    "tests/keras3/pretrained/hub_decoders_test.py::"
    "test_hub_decoder_loads_with_equal_logits_and_saves_back[llama3_tied]",
    "tests/keras3/pretrained/hub_decoders_test.py::"
    "test_hub_decoder_loads_with_equal_logits_and_saves_back[llama3_rope_scaling]",
    "tests/keras3/pretrained/hub_decoders_test.py::"
    "test_hub_decoder_loads_with_equal_logits_and_saves_back[qwen2]",
    # fit on JAX: standard, grouped and latent (the trainer is the same for all kinds).
    "tests/keras3/layers/layer_contract_test.py::test_fit_lowers_the_loss[FixedHeadAttention]",
    "tests/keras3/layers/layer_contract_test.py::test_fit_lowers_the_loss[CollaborativeAttention]",
    "tests/keras3/layers/shared_kv_test.py::test_cache_holds_exactly_the_formulas_bytes",
    "tests/keras3/reparam/kv_convert_test.py::"
    "test_per_layer_sizes_give_a_per_layer_spec_and_cached_greedy_equals_uncached",
    "tests/keras3/reparam/kv_convert_test.py::test_the_models_cache_holds_the_formulas_bytes",
    "tests/keras3/reparam/kv_convert_test.py::"
    "test_approximate_conversions_stay_close_and_svd_beats_mean",
]
ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.skipif(keras.backend.backend() == "jax", reason="this is the JAX run")
@pytest.mark.skipif(os.environ.get(GUARD) == "1", reason="inside the backend subprocess")
@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
@pytest.mark.parametrize(
    "group",
    [
        pytest.param(group, marks=(pytest.mark.slow,) if group in SLOW_GROUPS else ())
        for group in JAX_GROUPS
    ],
)
def test_keras3_tests_pass_on_jax(group):
    files, paths = [], set()
    for entry in JAX_GROUPS[group]:  # "name" (a whole file) or "name::test"
        name, _, test = entry.partition("::")
        paths.add(f"tests/keras3/{name}_test.py")
        files.append(f"tests/keras3/{name}_test.py" + (f"::{test}" if test else ""))
    deselect = [f"--deselect={nodeid}" for nodeid in JAX_DESELECT if nodeid.split("::")[0] in paths]
    if group in JAX_GROUP_FILTERS:
        deselect += ["-k", JAX_GROUP_FILTERS[group]]
    env = dict(os.environ, KERAS_BACKEND="jax", **{GUARD: "1"})
    env.pop("PYTEST_XDIST_WORKER", None)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", *files, *deselect, "-q", "-p", "no:xdist"]
        # The suite's addopts run it with xdist: the subprocess runs serially.
        + ["-p", "no:cacheprovider", "-o", "addopts=", "-m", "not slow"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    passed = re.search(r"(\d+) passed", output)
    assert passed and int(passed.group(1)) > 0, output[-3000:]
