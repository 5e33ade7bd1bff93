"""Keras 3 TransformerEncoder and BertBackbone: masks, specs, configs, saving, training, counts."""

import keras
import numpy as np
import pytest
from keras import ops

from headsize_tf.core import params
from headsize_tf.core.spec import AttentionSpec, SpecError
from headsize_tf.keras3.layers import CollaborativeAttention, FixedHeadAttention, StandardAttention
from headsize_tf.keras3.modeling import BertBackbone, TransformerEncoder

# Few shapes, the ones of tests/keras3/pretrained/hf_import_test.py, and BERT's kernel
# initializer everywhere: on JAX every new (initializer, shape) pair and every
# eager op on a new shape is an XLA compilation.
WIDTH, INNER, VOCAB, POSITIONS, BATCH, LENGTH = 16, 32, 40, 24, 4, 7
INIT = {"kernel_initializer": keras.initializers.TruncatedNormal(stddev=0.02)}
SPECS = {
    "standard": AttentionSpec("standard", num_heads=4),
    "fixed_head": AttentionSpec("fixed_head", num_heads=2, head_size=8),
    "collaborative": AttentionSpec("collaborative", num_heads=4, shared_key_dim=8),
}


def numpy(x):
    return ops.convert_to_numpy(x)


def hidden(seed=0):
    return np.random.default_rng(seed).normal(size=(BATCH, LENGTH, WIDTH)).astype(np.float32)


def lengths_mask(*lengths):
    return (np.arange(LENGTH)[None, :] < np.array(lengths)[:, None]).astype(np.int32)


def backbone_inputs(batch=BATCH, length=LENGTH, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, VOCAB, size=(batch, length)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, length - 3 :] = 0
    ids[mask == 0] = 0
    return {"token_ids": ids, "segment_ids": (ids % 2).astype(np.int32), "padding_mask": mask}


def make_backbone(attention=SPECS["standard"], num_layers=2, **kwargs):
    kwargs = {"dropout": 0.0, "max_sequence_length": POSITIONS, **kwargs}
    return BertBackbone(
        vocabulary_size=VOCAB,
        num_layers=num_layers,
        hidden_dim=WIDTH,
        intermediate_dim=INNER,
        attention=attention,
        **kwargs,
    )


# ----------------------------------------------------------------- block
@pytest.mark.parametrize("normalize_first", [False, True])
def test_block_is_post_ln_or_pre_ln(normalize_first):
    block = TransformerEncoder(
        INNER, SPECS["standard"], activation="gelu", normalize_first=normalize_first, **INIT
    )
    x = hidden()
    mask = lengths_mask(7, 4, 6, 1)
    y = numpy(block(x, padding_mask=mask))
    assert y.shape == x.shape
    assert isinstance(block.attention_layer, StandardAttention)
    # The same computation from the block's sublayers.
    attention = block.attention_layer
    ffn = lambda h: block._feedforward_output_dense(block._feedforward_intermediate_dense(h))  # noqa: E731
    ln1, ln2 = block._self_attention_layer_norm, block._feedforward_layer_norm
    attention_mask = mask[:, None, :]
    if normalize_first:
        h = x + attention(ln1(x), ln1(x), attention_mask=attention_mask)
        expected = h + ffn(ln2(h))
    else:
        h = ln1(x + attention(x, x, attention_mask=attention_mask))
        expected = ln2(h + ffn(h))
    np.testing.assert_allclose(y, numpy(expected), atol=1e-5)
    # Post-LN ends with a LayerNorm (gamma 1, beta 0 at init): zero mean rows.
    row_means = np.abs(y.mean(-1)).max()
    assert (row_means < 1e-5) == (not normalize_first)


def test_padding_mask_hides_padded_positions_and_keras_masks_are_used():
    block = TransformerEncoder(INNER, SPECS["standard"], **INIT)
    x = hidden(seed=1)
    mask = lengths_mask(7, 3, 7, 5)
    y = numpy(block(x, padding_mask=mask))
    changed = x.copy()
    changed[1, 3:] = 100.0  # Padding content must not matter.
    y_changed = numpy(block(changed, padding_mask=mask))
    np.testing.assert_allclose(y_changed[1, :3], y[1, :3], atol=1e-5)
    assert np.abs(numpy(block(changed))[1, :3] - y[1, :3]).max() > 1e-3  # No mask: it does.
    # attention_mask alone, and combined with padding_mask by a minimum.
    full = np.broadcast_to(mask[:, None, :], (BATCH, LENGTH, LENGTH)).astype(bool)
    np.testing.assert_allclose(numpy(block(x, attention_mask=full)), y, atol=1e-6)
    causal = np.tril(np.ones((LENGTH, LENGTH), bool))[None].repeat(BATCH, 0)
    both = numpy(block(x, padding_mask=mask, attention_mask=causal))
    np.testing.assert_allclose(both, numpy(block(x, attention_mask=causal & full)), atol=1e-6)
    # A Keras mask (Embedding(mask_zero=True)) acts as the padding mask.
    ids = backbone_inputs()["token_ids"]
    embedding = keras.layers.Embedding(VOCAB, WIDTH, mask_zero=True, embeddings_initializer="zeros")
    embedding.build(ids.shape)
    embedding.embeddings.assign(np.random.default_rng(0).normal(size=(VOCAB, WIDTH)))
    np.testing.assert_allclose(
        numpy(block(embedding(ids))),
        numpy(block(embedding(ids), padding_mask=(ids > 0).astype(np.int32))),
        atol=1e-6,
    )
    with pytest.raises(ValueError, match="padding_mask must have shape"):
        block(x, padding_mask=np.ones((BATCH, LENGTH, LENGTH), np.int32))


@pytest.mark.parametrize("kind", ["fixed_head", "collaborative"])
def test_block_of_each_spec_and_config_round_trip(kind):
    block = TransformerEncoder(
        INNER,
        SPECS[kind].to_dict(),  # A dict of the spec's fields works too.
        dropout=0.1,
        activation="gelu_approximate",
        layer_norm_epsilon=1e-6,
        name="block",
        **INIT,
    )
    assert block.attention == SPECS[kind]
    x = hidden(seed=2)
    y = numpy(block(x))
    layer = block.attention_layer
    if kind == "fixed_head":
        assert isinstance(layer, FixedHeadAttention)
        assert (layer.num_heads, layer.head_size) == (2, 8)
        assert tuple(layer.query_dense.kernel.shape) == (WIDTH, 2, 8)
    else:
        assert isinstance(layer, CollaborativeAttention)
        assert (layer.num_heads, layer.shared_key_dim, layer.head_size) == (4, 8, 4)
    config = block.get_config()
    assert config["attention"] == SPECS[kind].to_dict()
    again = TransformerEncoder.from_config(config)
    assert again.get_config() == config
    again.build(x.shape)
    again.set_weights(block.get_weights())
    np.testing.assert_allclose(numpy(again(x)), y, atol=1e-6)


def test_block_rejects_per_layer_specs_and_bad_arguments():
    with pytest.raises(SpecError, match="scalar attention spec"):
        TransformerEncoder(INNER, AttentionSpec("standard", num_heads=[4, 2]))
    with pytest.raises(SpecError, match="intermediate_dim"):
        TransformerEncoder(0, SPECS["standard"])
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\)"):
        TransformerEncoder(INNER, SPECS["standard"], dropout=1.0)


# -------------------------------------------------------------- backbone
def test_per_layer_specs_build_their_heads():
    spec = AttentionSpec("fixed_head", num_heads=[4, 2, 4], head_size=[4, "sequence_length", 4])
    backbone = make_backbone(spec, num_layers=3, max_sequence_length=8)
    layers = backbone.attention_layers
    assert [(a.num_heads, a.head_size) for a in layers] == [(4, 4), (2, 8), (4, 4)]
    assert [tuple(a.query_dense.kernel.shape) for a in layers] == [
        (WIDTH, 4, 4),
        (WIDTH, 2, 8),
        (WIDTH, 4, 4),
    ]
    assert [type(a) for a in layers] == [FixedHeadAttention] * 3
    assert len(backbone.transformer_layers) == 3
    assert backbone.attention_spec.head_size == (4, 8, 4)
    assert backbone.get_config()["attention"]["head_size"] == [4, "sequence_length", 4]
    outputs = backbone(backbone_inputs())
    assert tuple(outputs["sequence_output"].shape) == (BATCH, LENGTH, WIDTH)
    assert tuple(outputs["pooled_output"].shape) == (BATCH, WIDTH)
    assert np.abs(numpy(outputs["pooled_output"])).max() <= 1.0  # tanh pooler
    with pytest.raises(SpecError, match="per-layer lists of 2 entries, but the model has 3"):
        make_backbone(AttentionSpec("standard", num_heads=[4, 2]), num_layers=3)


@pytest.mark.parametrize(
    "spec",
    [
        SPECS["standard"],
        AttentionSpec("fixed_head", num_heads=[2, 4], head_size=[8, 4]),
        AttentionSpec("collaborative", num_heads=[4, 2], shared_key_dim=8),
    ],
    ids=["standard", "fixed_head", "collaborative"],
)
def test_parameter_count_equals_the_core_formula(spec):
    backbone = make_backbone(spec)
    encoder = params.EncoderSpec(
        vocab_size=VOCAB,
        width=WIDTH,
        num_layers=2,
        attention=spec,
        intermediate_size=INNER,
        max_sequence_length=POSITIONS,
    )
    expected = params.encoder_params(encoder)
    assert backbone.count_params() == expected.total
    trainable = sum(int(np.prod(w.shape)) for w in backbone.trainable_weights)
    assert trainable == expected.trainable


def test_config_and_keras_file_round_trip(tmp_path):
    spec = AttentionSpec("collaborative", num_heads=[4, 2], shared_key_dim=8)
    backbone = make_backbone(spec, dropout=0.1, activation="gelu_approximate", name="bert")
    inputs = backbone_inputs()
    expected = backbone(inputs)
    config = backbone.get_config()
    assert BertBackbone.from_config(config).get_config() == config
    path = tmp_path / "backbone.keras"
    backbone.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, BertBackbone)
    assert loaded.get_config() == config
    assert loaded.attention_spec == spec
    got = loaded(inputs)
    for key in ("sequence_output", "pooled_output"):
        np.testing.assert_allclose(numpy(got[key]), numpy(expected[key]), atol=1e-6)


def test_fit_lowers_the_loss():
    keras.utils.set_random_seed(0)
    backbone = make_backbone(SPECS["fixed_head"], num_layers=1)
    logits = keras.layers.Dense(2, name="classifier")(backbone.output["pooled_output"])
    model = keras.Model(backbone.input, logits)
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    inputs = backbone_inputs(batch=16, seed=3)
    labels = (inputs["token_ids"][:, 1] > VOCAB // 2).astype(np.int32)
    # One full batch a step, no dropout: the first loss is the untrained model's.
    losses = model.fit(inputs, labels, batch_size=16, epochs=8, verbose=0).history["loss"]
    assert np.isfinite(losses).all()
    assert losses[-1] < 0.8 * losses[0], losses


def test_head_mask_reaches_the_blocks():
    backbone = make_backbone()
    inputs = backbone_inputs()
    before = numpy(backbone(inputs)["sequence_output"])
    backbone.attention_layers[1].set_head_mask([1.0, 0.0, 1.0, 1.0])
    masked = numpy(backbone(inputs)["sequence_output"])
    assert np.abs(masked - before).max() > 1e-4
    backbone.attention_layers[1].set_head_mask(np.ones(4))
    np.testing.assert_allclose(numpy(backbone(inputs)["sequence_output"]), before, atol=1e-6)
