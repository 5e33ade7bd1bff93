"""Our tf_keras layers and models call without autograph, as Keras's own layers do."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from headsize_tf.layers import (
    CollaborativeAttention,
    FixedHeadAttention,
    GroupedAttention,
    LatentAttention,
    StandardAttention,
)
from headsize_tf.layers.autograph import without_autograph
from headsize_tf.modeling.bert_encoder import HeadsizeBertEncoder
from headsize_tf.modeling.causal_lm import HeadsizeCausalLM
from headsize_tf.modeling.decoder_block import HeadsizeDecoderBlock
from headsize_tf.modeling.sentence_classifier import SentenceClassifier
from headsize_tf.modeling.seq2seq import HeadsizeSeq2Seq
from headsize_tf.modeling.transformer_block import HeadsizeTransformerBlock

CLASSES = [
    StandardAttention,
    FixedHeadAttention,
    CollaborativeAttention,
    GroupedAttention,
    LatentAttention,
    HeadsizeTransformerBlock,
    HeadsizeBertEncoder,
    HeadsizeDecoderBlock,
    HeadsizeCausalLM,
    HeadsizeSeq2Seq,
    SentenceClassifier,
]
X = np.random.default_rng(0).normal(size=(2, 3, 8)).astype("float32")


def _branching(self, query, key, value, attention_mask=None, training=None):
    """Stock MHA's `_compute_attention` with a Python `if` on a tensor (needs autograph)."""
    if tf.reduce_sum(query) > 1e9:
        query = query * 0.0
    return super(type(self), self)._compute_attention(
        query, key, value, attention_mask=attention_mask, training=training
    )


def _branching_logits(self, query, projected):
    """Our layers' `_logits_from_projected` with the same `if`."""
    if tf.reduce_sum(query) > 1e9:
        query = query * 0.0
    return super(type(self), self)._logits_from_projected(query, projected)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_call_is_marked_and_keeps_its_arguments(cls):
    # Marked like `tf.autograph.experimental.do_not_convert`'s functions.
    assert hasattr(cls.call, "autograph_info__")
    # tf_keras reads `training` / `mask` from the signature the decorator keeps: Model
    # Garden's blocks take no `training` (tf_keras must not pass one), ours do.
    args = tf_keras.src.utils.tf_inspect.getfullargspec(cls.call).args
    if cls is HeadsizeBertEncoder:
        assert args == ["self", "inputs"]
    elif cls is HeadsizeTransformerBlock:
        assert args == ["self", "inputs", "output_range"]
    else:
        assert args[0] == "self" and args[-1] in ("training", "use_causal_mask")
        assert "training" in args


def test_extension_overrides_run_unconverted_as_in_stock_mha_call_overrides_converted():
    # Stock MHA's `call` is Keras code, which autograph never converts, so a user's
    # `_compute_attention` runs unconverted there; so does an override of our layers'
    # `_logits_from_projected`. A Python `if` on a tensor raises in both.
    cases = (
        (tf_keras.layers.MultiHeadAttention, {"key_dim": 4}, {"_compute_attention": _branching}),
        (StandardAttention, {}, {"_logits_from_projected": _branching_logits}),
    )
    for base, kwargs, override in cases:
        layer = type("Branching", (base,), override)(2, **kwargs)
        layer(X, X)  # Built eagerly, where the `if` is plain Python.
        with pytest.raises(tf.errors.OperatorNotAllowedInGraphError):
            tf.function(lambda x, layer=layer: layer(x, x))(X)

    class OwnCall(StandardAttention):
        def call(self, query, value, **kwargs):
            if tf.reduce_sum(query) > 1e9:  # The subclass's own code is converted.
                query = query * 0.0
            return super().call(query, value, **kwargs)

    layer = OwnCall(num_heads=2)
    got = tf.function(lambda x: layer(x, x))(X)
    np.testing.assert_allclose(got, layer(X, X), atol=1e-6)


def test_the_decorator_changes_only_the_decorated_class():
    class Base(tf_keras.layers.Layer):
        def call(self, x, training=None):
            return x + (1.0 if training else 0.0)

    @without_autograph
    class Child(Base):
        pass

    assert not hasattr(Base.call, "autograph_info__")
    assert hasattr(Child.call, "autograph_info__")
    layer = Child()
    assert layer._expects_training_arg  # Read through the decorator.
    np.testing.assert_allclose(layer(X, training=True), X + 1.0)
    np.testing.assert_allclose(tf.function(lambda x: layer(x, training=False))(X), X)


def test_the_trainers_steps_are_not_converted():
    """`headsize-tf train` runs Model Garden's task steps unconverted, as Keras 3's own
    trainer marks its steps (orbit's loop around them keeps its autograph)."""
    from headsize_tf.training import train

    trainer = train._resumable_trainer_cls()
    assert hasattr(trainer.train_step, "autograph_info__")
    assert hasattr(trainer.eval_step, "autograph_info__")
