"""`finetune.predict_logits`: one trace per model, reused; the model is not kept alive."""

import gc
import weakref

import numpy as np
import tf_keras

from headsize_tf.training import finetune as ft


class _Counting(tf_keras.Model):
    """Sums each example's embedded tokens (masked) into 2 logits; counts its traces."""

    def __init__(self):
        super().__init__()
        self.embed = tf_keras.layers.Embedding(10, 2)
        self.traces = 0

    def call(self, inputs, training=False):
        self.traces += 1
        mask = tf_keras.backend.cast(inputs["input_mask"], "float32")[..., None]
        return tf_keras.backend.sum(self.embed(inputs["input_word_ids"]) * mask, axis=1)


def test_the_forward_pass_is_traced_once_and_reused():
    model = _Counting()
    ids = [np.arange(1, n + 1) for n in (3, 5, 2, 7)]
    first = ft.predict_logits(model, ids, batch_size=2)  # Batches of two lengths.
    traces = model.traces
    again = ft.predict_logits(model, ids, batch_size=2)
    assert model.traces == traces  # A timed pass measures the model, not tracing.
    np.testing.assert_array_equal(again, first)
    table = model.embed.get_weights()[0]
    np.testing.assert_allclose(first[3], table[1:8].sum(axis=0), rtol=1e-6)
    assert ft.accuracy(model, ids, np.argmax(first, axis=-1)) == 1.0
    assert model.traces == traces

    ref = weakref.ref(model)
    del model
    gc.collect()
    assert ref() is None  # The cached function did not keep the model.
