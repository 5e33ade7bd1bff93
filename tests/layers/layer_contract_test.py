"""Every tf_keras attention layer meets the checks of tests/layers/layer_check.py.

Per layer class (StandardAttention, FixedHeadAttention, CollaborativeAttention,
GroupedAttention, LatentAttention): build and output shapes; a config holding
every constructor argument, cloned by from_config with equal outputs; the
parameter count of `core.params.attention_params`; .keras and SavedModel round
trips of a model with an attention-mask input; padding and causal masks;
mixed_float16 and mixed_bfloat16; `fit`.
"""

import functools

import tensorflow as tf
from absl.testing import parameterized

from tests.layers import layer_check

CASES = layer_check.CASES
PARAMS = [(name, name) for name in CASES]


@functools.cache
def _built(name: str):
    """One built float32 layer per class, with random weights (shared by the tests)."""
    layer = CASES[name].make()
    layer(*layer_check.inputs())
    layer_check.randomize(layer, seed=3)
    return layer


class LayerContractTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.named_parameters(*PARAMS)
    def test_build_and_output_shapes(self, name):
        layer_check.check_build(self, CASES[name])

    @parameterized.named_parameters(*PARAMS)
    def test_config_round_trip_and_parameter_count(self, name):
        layer_check.check_config_and_params(self, CASES[name])

    @parameterized.named_parameters(*PARAMS)
    def test_keras_and_savedmodel_round_trip(self, name):
        layer_check.check_saving(self, CASES[name])

    @parameterized.named_parameters(*PARAMS)
    def test_masks(self, name):
        layer_check.check_masks(self, _built(name))

    @parameterized.named_parameters(*PARAMS)
    def test_dtype_policies(self, name):
        layer_check.check_dtype_policies(self, CASES[name], reference=_built(name))

    @parameterized.named_parameters(*PARAMS)
    def test_fit_lowers_the_loss(self, name):
        layer_check.check_fit(self, CASES[name])
