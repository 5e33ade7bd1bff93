"""Keras 3 `CausalLM`: the forward pass from its sublayers (numpy), causality, the core
parameter formula, config / `.keras` round trips and training with `fit`."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from headsize_tf import params
from headsize_tf.keras3.modeling import CausalLM

VOCAB, WIDTH, LENGTH = 50, 16, 12
SPECS = {
    "standard": {"kind": "standard", "num_heads": 4},
    "fixed_head": {"kind": "fixed_head", "num_heads": [2, 6], "head_size": [8, 12]},
    "collaborative": {"kind": "collaborative", "num_heads": 4, "shared_key_dim": 8},
}


def numpy(x) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(x))


def make(kind: str = "standard", **kwargs) -> CausalLM:
    keras.utils.set_random_seed(0)
    args = dict(
        vocabulary_size=VOCAB,
        num_layers=2,
        hidden_dim=WIDTH,
        attention=SPECS[kind],
        max_sequence_length=LENGTH,
    )
    return CausalLM(**{**args, **kwargs})


def ids(batch: int = 2, length: int = 7, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(1, VOCAB, (batch, length)).astype("int32")


def greedy_oracle(lm: CausalLM, prompt: np.ndarray, new_tokens: int) -> np.ndarray:
    """Uncached greedy decoding: the whole sequence through the model for each token.

    The sequence sits in a buffer of its final length (later positions hold filler,
    which a causal model's earlier logits do not see: tested above), so every pass has
    one shape: JAX compiles it once instead of once per length.
    """
    batch, length = prompt.shape
    sequence = np.ones((batch, length + new_tokens), "int32")
    sequence[:, :length] = prompt
    for position in range(length, length + new_tokens):
        sequence[:, position] = numpy(lm(sequence))[:, position - 1].argmax(-1)
    return sequence


@pytest.mark.parametrize("kind", list(SPECS))
def test_forward_is_embeddings_causal_pre_ln_blocks_and_tied_logits(kind):
    lm = make(kind)
    tokens = ids()
    logits = numpy(lm(tokens))
    # The same computation from the model's parts: positions added, a lower-triangular
    # mask in every block, the final LayerNorm, the token embedding transposed.
    table = numpy(lm.token_embedding.embeddings)
    x = table[tokens] + numpy(lm.position_embedding.position_embeddings)[: tokens.shape[1]]
    causal = np.tril(np.ones((7, 7), "int32"))[None].repeat(2, axis=0)
    for block in lm.transformer_layers:
        x = numpy(block(x, attention_mask=causal))
    expected = numpy(lm.final_norm(x)) @ table.T
    np.testing.assert_allclose(logits, expected, atol=1e-5)


@pytest.mark.parametrize("kind", list(SPECS))
def test_a_position_sees_only_earlier_tokens(kind):
    lm = make(kind)
    tokens = ids(batch=1, length=8)
    changed = tokens.copy()
    changed[0, 5:] = (changed[0, 5:] % (VOCAB - 1)) + 1  # Other tokens from position 5 on.
    a, b = numpy(lm(tokens)), numpy(lm(changed))
    np.testing.assert_allclose(a[0, :5], b[0, :5], atol=1e-6)
    assert np.abs(a[0, 5:] - b[0, 5:]).max() > 1e-4


@pytest.mark.parametrize("kind", list(SPECS))
def test_parameter_count_equals_the_core_formula(kind):
    lm = make(kind)
    lm(ids())
    spec = params.EncoderSpec(
        vocab_size=VOCAB,
        width=WIDTH,
        num_layers=2,
        attention=SPECS[kind],
        intermediate_size=4 * WIDTH,
        max_sequence_length=LENGTH,
    )
    assert lm.count_params() == params.causal_lm_params(spec).trainable
    assert [layer.num_heads for layer in lm.attention_layers] == (
        [2, 6] if kind == "fixed_head" else [4, 4]
    )


def test_head_size_sequence_length_resolves_to_the_positions():
    lm = make(attention={"kind": "fixed_head", "num_heads": 2, "head_size": "sequence_length"})
    lm(ids())
    assert [layer.head_size for layer in lm.attention_layers] == [LENGTH, LENGTH]


def test_config_and_keras_file_round_trip(tmp_path):
    lm = make("fixed_head", dropout=0.1, intermediate_dim=24, name="lm")
    tokens = ids()
    expected = numpy(lm(tokens))
    config = lm.get_config()
    assert CausalLM.from_config(config).get_config() == config
    path = tmp_path / "lm.keras"
    lm.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, CausalLM) and loaded.get_config() == config
    np.testing.assert_allclose(numpy(loaded(tokens)), expected, atol=1e-6)


def test_bad_arguments_name_the_value():
    with pytest.raises(ValueError, match="num_layers"):
        make(num_layers=0)
    with pytest.raises(ValueError, match="intermediate_dim"):
        make(intermediate_dim=-3)


def test_fit_learns_a_repeating_sequence():
    """Next-token prediction of period-5 sequences: after a few epochs the loss is far
    below the untrained model's (compared within the test, not to a fixed number)."""
    lm = make(attention={"kind": "fixed_head", "num_heads": 2, "head_size": 8}, num_layers=1)
    rng = np.random.default_rng(3)
    starts = rng.integers(0, 5, 64)
    sequences = np.array([(np.arange(LENGTH + 1) + s) % 5 + 1 for s in starts], "int32")
    x, y = sequences[:, :-1], sequences[:, 1:]
    lm.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    untrained = lm.evaluate(x, y, verbose=0)
    lm.fit(x, y, batch_size=16, epochs=10, verbose=0)
    assert lm.evaluate(x, y, verbose=0) < 0.3 * untrained


def lm_loss(targets, logits):
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)(targets, logits)


def formula_params(lm: CausalLM) -> int:
    spec = params.EncoderSpec(
        vocab_size=VOCAB,
        width=WIDTH,
        num_layers=lm.num_layers,
        attention=lm.attention_spec,
        intermediate_size=4 * WIDTH,
        max_sequence_length=LENGTH,
    )
    return params.causal_lm_params(spec).trainable


@pytest.mark.parametrize("kind", list(SPECS))
def test_removed_heads_compute_what_the_gates_masked(kind):
    from headsize_tf.keras3.pruning import head_mask, remove_heads, set_head_mask

    lm = make(kind)
    tokens = ids()
    mask = np.nan_to_num(head_mask(lm))  # Ones where a head exists.
    mask[0, 1] = 0.0
    mask[1, :] = 0.0  # A whole layer pruned: it keeps one zeroed head.
    mask[0, 0] = 0.5  # A gate that is not 0 or 1 is folded into the kept head.
    set_head_mask(lm, mask)
    masked = numpy(lm(tokens))
    pruned = remove_heads(lm)
    assert isinstance(pruned, CausalLM)
    heads = [layer.num_heads for layer in lm.attention_layers]
    assert [layer.num_heads for layer in pruned.attention_layers] == [heads[0] - 1, 1]
    np.testing.assert_allclose(numpy(pruned(tokens)), masked, atol=1e-5)
    assert pruned.count_params() == formula_params(pruned) < lm.count_params()
    # The pruned layer's one head adds nothing (its output rows are zero): pruned, not live,
    # for a second pruning, though its gate is back at one.
    again = head_mask(pruned)
    assert again[1, 0] == 0.0 and np.all(again[0, : heads[0] - 1] != 0)


@pytest.mark.parametrize("kind", ["standard", "fixed_head"])
def test_cp_conversion_is_exact_at_full_rank_and_counts_its_parameters(kind):
    from headsize_tf.keras3.reparam import compress_backbone

    lm = make(kind)
    tokens = ids()
    full = max(layer.num_heads * layer.head_size for layer in lm.attention_layers)
    exact, reports = compress_backbone(lm, full, seed=0)
    assert isinstance(exact, CausalLM) and exact.attention_spec.kind == "collaborative"
    assert len(reports) == 2
    np.testing.assert_allclose(numpy(exact(tokens)), numpy(lm(tokens)), atol=1e-4)
    small, _ = compress_backbone(lm, 4, seed=0)
    assert small.count_params() == formula_params(small) < lm.count_params()


def test_head_importance_is_the_gates_gradient():
    """E|dL/dxi_h| of the LM loss against central finite differences of that loss."""
    from headsize_tf.keras3.pruning import head_importance, set_head_mask

    lm = make("fixed_head")
    tokens = ids(batch=2, length=8, seed=1)
    x, y = tokens[:, :-1], tokens[:, 1:]
    scores = head_importance(lm, [(x, y)], lm_loss, normalize=False)
    heads = [layer.num_heads for layer in lm.attention_layers]
    assert scores.shape == (2, max(heads))
    assert np.isnan(scores[0, heads[0] :]).all()  # Layer 0 has fewer heads.
    eps = 1e-1  # float32 noise < 0.2% of the difference (at 1e-2 it neared 2%).
    for layer, head in [(0, 1), (1, 4)]:
        values = []
        for sign in (1, -1):
            mask = np.where(np.isnan(scores), 0.0, 1.0)
            mask[layer, head] += sign * eps
            set_head_mask(lm, mask)
            values.append(float(numpy(lm_loss(y, lm(x)))))
        gradient = (values[0] - values[1]) / (2 * eps)
        np.testing.assert_allclose(scores[layer, head], abs(gradient) / x.size, rtol=2e-2)


@pytest.mark.parametrize("kind", list(SPECS))
def test_cached_decoding_equals_the_full_forward_pass(kind):
    lm = make(kind)
    tokens = ids(length=LENGTH)
    full = numpy(lm(tokens))
    logits, caches = lm.prefill(tokens[:, :4], LENGTH)
    np.testing.assert_allclose(numpy(logits), full[:, :4], atol=1e-5)
    for index in range(4, LENGTH):
        logits, caches = lm.decode_step(tokens[:, index : index + 1], caches, index)
        np.testing.assert_allclose(numpy(logits)[:, 0], full[:, index], atol=1e-5)


def test_greedy_generation_equals_argmax_of_the_full_pass():
    lm = make("fixed_head")
    prompt = ids(length=3)
    out = lm.generate(prompt, max_new_tokens=6)
    assert out.shape == (2, 9) and out.dtype == np.int32
    np.testing.assert_array_equal(out[:, :3], prompt)
    np.testing.assert_array_equal(out, greedy_oracle(lm, prompt, 6))
    np.testing.assert_array_equal(lm.generate(prompt, max_new_tokens=6, compile=False), out)


def test_the_compiled_step_reads_the_current_weights():
    lm = make("fixed_head")
    prompt = ids(length=3)
    before = lm.generate(prompt, 5)
    table = numpy(lm.token_embedding.embeddings)
    lm.token_embedding.embeddings.assign(np.roll(table, 1, axis=0))  # Other weights.
    after = lm.generate(prompt, 5)  # The step compiled by the first call, reused.
    np.testing.assert_array_equal(after, lm.generate(prompt, 5, compile=False))
    assert not np.array_equal(after, before)
    # New variables (LoRA on the token embedding) make a new compiled step.
    lm.token_embedding.enable_lora(2)
    lora = lm.token_embedding.lora_embeddings_b
    lora.assign(np.random.default_rng(0).normal(size=lora.shape).astype("float32"))
    lora_out = lm.generate(prompt, 5)
    np.testing.assert_array_equal(lora_out, lm.generate(prompt, 5, compile=False))
    assert not np.array_equal(lora_out, after)


def test_sampling_is_seeded_top_1_is_greedy_and_end_tokens_stop_a_row():
    lm = make("standard")
    prompt = ids(length=2)
    a = lm.generate(prompt, 8, temperature=1.0, seed=7)
    np.testing.assert_array_equal(a, lm.generate(prompt, 8, temperature=1.0, seed=7))
    assert not np.array_equal(a, lm.generate(prompt, 8, temperature=1.0, seed=8))
    assert ((a >= 0) & (a < VOCAB)).all()
    greedy = lm.generate(prompt, 8)
    np.testing.assert_array_equal(lm.generate(prompt, 8, temperature=2.0, top_k=1), greedy)
    end = int(greedy[0, 4])  # Row 0's third new token, used as the end token.
    stopped = lm.generate(prompt, 8, end_token_id=end)
    first = int(np.argmax(greedy[0, 2:] == end)) + 2
    np.testing.assert_array_equal(stopped[0, : first + 1], greedy[0, : first + 1])
    assert (stopped[0, first:] == end).all()
    # Row 1 decodes on greedily until its own first end token (if any), then is filled.
    ends = np.flatnonzero(greedy[1, 2:] == end)
    last = ends[0] + 2 if len(ends) else greedy.shape[1] - 1
    np.testing.assert_array_equal(stopped[1, : last + 1], greedy[1, : last + 1])
    assert (stopped[1, last + 1 :] == end).all() or not len(ends)
    # One row: decoding stops at its end token and the rest is end tokens.
    single = lm.generate(prompt[:1], 8, end_token_id=end)
    np.testing.assert_array_equal(single, stopped[:1])


def test_top_k_keeps_exactly_k_candidates_when_logits_tie():
    lm = make("standard")
    table = lm.token_embedding.embeddings
    table.assign(np.tile(numpy(table)[:1], (VOCAB, 1)))  # Every token's logit ties.
    prompt = ids(length=2)
    runs = [lm.generate(prompt, 6, temperature=1.0, top_k=1, seed=s) for s in range(3)]
    for other in runs[1:]:  # One candidate per step: the seed cannot matter.
        np.testing.assert_array_equal(other, runs[0])
    assert not np.array_equal(runs[0], lm.generate(prompt, 6, temperature=1.0, seed=0))


@pytest.mark.parametrize("mode", ["int8", "int4"])
def test_a_quantized_model_dequantizes_its_tied_output_table(mode, tmp_path):
    lm = make("fixed_head")
    tokens = ids(length=LENGTH)
    full = numpy(lm(tokens))
    lm.quantize(mode)
    assert lm.token_embedding.quantization_mode == mode
    quantized = numpy(lm(tokens))
    # The output table is the dequantized one the input lookup uses, so the logits stay
    # within quantization error of the float model's (a raw integer table is ~1000x off).
    error = np.abs(quantized - full).max() / np.abs(full).max()
    assert error < (0.05 if mode == "int8" else 0.3)
    logits, caches = lm.prefill(tokens[:, :4], LENGTH)
    np.testing.assert_allclose(numpy(logits), quantized[:, :4], atol=1e-5)
    np.testing.assert_array_equal(
        lm.generate(tokens[:, :3], 5), greedy_oracle(lm, tokens[:, :3], 5)
    )
    # Saved as .keras, it loads quantized (its layers' policies saved by path) and computes
    # the same logits.
    lm.save(tmp_path / "quantized.keras")
    again = keras.saving.load_model(tmp_path / "quantized.keras")
    assert again.token_embedding.quantization_mode == mode
    assert again.attention_layers[0]._query_dense.quantization_mode == mode
    np.testing.assert_array_equal(numpy(again(tokens)), quantized)


@pytest.mark.parametrize(
    "kind, mode",
    [("grouped", "int8"), ("latent", "int4"), ("latent", "float8"), ("collaborative", "int8")],
)
def test_quantized_models_of_every_kv_kind_reload_from_keras_files(kind, mode, tmp_path):
    attention = {
        "grouped": {"kind": "grouped", "num_heads": 4, "num_kv_heads": 2},
        "latent": {"kind": "latent", "num_heads": 4, "kv_latent_dim": 8},
        "collaborative": {"kind": "collaborative", "num_heads": 4, "shared_key_dim": 8},
    }[kind]
    from headsize_tf.core.spec import SpecError
    from headsize_tf.keras3.modeling.surgery import with_attention

    with keras.name_scope("outer"):  # Built under a scope, then renamed: paths move.
        lm = make(attention=attention)
    lm.name = f"renamed_{kind}"
    tokens = ids(length=LENGTH)
    lm.quantize(mode)
    want = numpy(lm(tokens))
    for generation in range(2):  # A reloaded model saves and reloads again, in any scope.
        path = tmp_path / f"{generation}.keras"
        lm.save(path)
        with keras.name_scope(f"scope_{generation}"):
            lm = keras.saving.load_model(path)
        assert all(
            layer.quantization_mode == mode
            for layer in lm.attention_layers[0]._flatten_layers(include_self=False)
            if isinstance(layer, keras.layers.EinsumDense)
        )
        np.testing.assert_array_equal(numpy(lm(tokens)), want)
    # Integer kernels cannot be rebuilt (converted, pruned): the float model is, then quantized.
    with pytest.raises(SpecError, match=f"is quantized \\({mode}\\): .* convert or prune"):
        with_attention(lm, lm.attention)


def test_prefill_and_decode_step_check_their_positions():
    lm = make()
    with pytest.raises(ValueError, match=r"prompt length \(7\) <= length \(5\)"):
        lm.prefill(ids(length=7), 5)
    with pytest.raises(ValueError, match="max_sequence_length \\(12\\)"):
        lm.prefill(ids(length=3), 13)
    _, caches = lm.prefill(ids(length=3), 6)
    with pytest.raises(ValueError, match=r"index in \[0, 6\).*index 6"):
        lm.decode_step(ids(length=1), caches, 6)
    with pytest.raises(ValueError, match=r"\[batch, 1\] tokens"):
        lm.decode_step(ids(length=2), caches, 3)


def test_dropout_sits_where_the_tf_keras_lm_has_it():
    """The tf_keras LM: embedding, residual and feed-forward (after the activation and
    after the output) dropout at `dropout_rate`; attention probabilities at
    `attention_dropout_rate` (0 by default)."""
    lm = make(dropout=0.1)
    assert lm.embedding_dropout.rate == 0.1
    for block in lm.transformer_layers:
        assert block.attention_layer._dropout == 0.0
        assert block._self_attention_dropout.rate == 0.1
        assert block._feedforward_intermediate_dropout.rate == 0.1
        assert block._feedforward_dropout.rate == 0.1
    assert (
        make(dropout=0.1, attention_dropout=0.2).transformer_layers[0].attention_layer._dropout
        == 0.2
    )
    # In training the inner dropout acts: the FFN output changes, inference does not.
    block = lm.transformer_layers[0]
    x = np.random.default_rng(0).normal(size=(2, 5, WIDTH)).astype("float32")
    np.testing.assert_allclose(numpy(block(x)), numpy(block(x)), atol=0)
    assert np.abs(numpy(block(x, training=True)) - numpy(block(x))).max() > 1e-4


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"max_new_tokens": 11},
            "prompt length 2 \\+ max_new_tokens 11 = 13 exceeds max_sequence_length 12",
        ),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"max_new_tokens": 2, "temperature": -1.0}, "temperature must be >= 0"),
        ({"max_new_tokens": 2, "top_k": 0}, "top_k"),
    ],
)
def test_generate_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make().generate(ids(length=2), **kwargs)
    with pytest.raises(ValueError, match="prompt_ids must be"):
        make().generate(np.zeros((2, 0), "int32"), 2)
