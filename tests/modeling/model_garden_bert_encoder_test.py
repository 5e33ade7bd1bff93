"""Model Garden's own `bert_encoder_test.py`, run against `HeadsizeBertEncoder`.

The peer test file of the installed `official` package is loaded as a private
module whose `bert_encoder.BertEncoderV2` is `HeadsizeBertEncoder` with
standard attention, taking `BertEncoderV2`'s arguments and defaults (the stock
`num_attention_heads` becomes `attention=AttentionSpec("standard", num_heads=...)`);
`BertEncoder` (V1) stays stock. So the V2-vs-V1 compatibility tests compare our
encoder with stock Model Garden at the suite's own tolerance (1e-6; the outputs
are in fact equal to the last bit), and the V2 cases of the other tests build,
save and reload our encoder.

One default differs by design and is given as stock's where a test leaves it out:
`HeadsizeBertEncoder`'s `inner_activation` is exact GELU ("gelu"), stock's is the
tanh approximation. The two differ by up to 1.7e-6 in these tests' outputs (small
initial weights keep the FFN inputs near 0, where the approximation is close).

Excluded by design (the only ones, `BY_DESIGN`): width 32 with 5 heads, which
standard attention refuses (head size = width // heads needs width % heads == 0;
stock MHA silently uses head size 6). Those two run here expecting the refusal.

Left out: the `encoder_v1` cases of the parametrized tests (`STOCK_ONLY`). They build
stock `BertEncoder` alone and test Model Garden, not this library (7 cases, 14 s of
the file's 57 s on 2 cores); the V1 encoder still runs as the reference of
`BertEncoderV2CompatibilityTest` and of `test_serialize_deserialize`.
"""

from __future__ import annotations

import importlib.util
import inspect
import types

import tf_keras
from official.nlp.modeling.networks import bert_encoder as stock_bert_encoder

from headsize_tf.core.spec import AttentionSpec
from headsize_tf.modeling.bert_encoder import HeadsizeBertEncoder

PEER = "official.nlp.modeling.networks.bert_encoder_test"
REFUSAL = r"the query width \(32\) is not a multiple of num_heads \(5\)"
BY_DESIGN = {
    "test_dict_outputs_network_creation_return_attention_scores_encoder_v2": (
        "width 32 with 5 heads: standard attention refuses width % heads != 0"
    ),
    "test_dict_outputs_network_creation_return_word_embeddings_encoder_v2": (
        "width 32 with 5 heads: standard attention refuses width % heads != 0"
    ),
}


_STOCK_DEFAULTS = inspect.signature(stock_bert_encoder.BertEncoderV2.__init__).parameters
_STOCK_ACTIVATION = _STOCK_DEFAULTS["inner_activation"].default  # gelu(x, approximate=True)


@tf_keras.utils.register_keras_serializable(package="headsize_tf_tests")
class StandardHeadsizeBertEncoder(HeadsizeBertEncoder):
    """`HeadsizeBertEncoder` with `BertEncoderV2`'s arguments and defaults (standard attention)."""

    def __init__(self, *args, num_attention_heads: int | None = None, **kwargs):
        if num_attention_heads is not None:
            kwargs["attention"] = AttentionSpec("standard", num_heads=num_attention_heads)
        if "inner_activation" not in kwargs and "activation" not in kwargs:
            kwargs["inner_activation"] = _STOCK_ACTIVATION
        super().__init__(*args, **kwargs)


def _load_peer() -> types.ModuleType:
    """Loads the peer test file with `BertEncoderV2` swapped for ours (stock left untouched)."""
    origin = importlib.util.find_spec(PEER).origin
    spec = importlib.util.spec_from_file_location("_model_garden_bert_encoder_test", origin)
    module = importlib.util.module_from_spec(spec)
    stock_v2 = stock_bert_encoder.BertEncoderV2
    # `parameterized.named_parameters` reads the class while the file is executed.
    stock_bert_encoder.BertEncoderV2 = StandardHeadsizeBertEncoder
    try:
        spec.loader.exec_module(module)
    finally:
        stock_bert_encoder.BertEncoderV2 = stock_v2
    # The test bodies read `bert_encoder.BertEncoderV2` when they run.
    module.bert_encoder = types.SimpleNamespace(
        BertEncoder=stock_bert_encoder.BertEncoder, BertEncoderV2=StandardHeadsizeBertEncoder
    )
    return module


_PEER = _load_peer()


def _refused(name: str, reason: str):
    """The peer's test `name`, which must fail with standard attention's refusal."""
    peer_test = getattr(_PEER.BertEncoderTest, name)

    def test(self):
        with self.assertRaisesRegex(ValueError, REFUSAL):
            peer_test(self)

    test.__doc__ = f"Excluded by design ({reason}): the refusal is checked instead."
    return test


class BertEncoderTest(_PEER.BertEncoderTest):
    """Model Garden's `BertEncoderTest`; its V2 cases build `HeadsizeBertEncoder`."""


# unittest collects only callable attributes: None hides the peer's stock-only cases.
STOCK_ONLY = sorted(name for name in dir(_PEER.BertEncoderTest) if name.endswith("_encoder_v1"))
for _name in STOCK_ONLY:
    setattr(BertEncoderTest, _name, None)


for _name, _reason in BY_DESIGN.items():
    setattr(BertEncoderTest, _name, _refused(_name, _reason))


class BertEncoderV2CompatibilityTest(_PEER.BertEncoderV2CompatibilityTest):
    """Model Garden's V2-vs-V1 tests: `HeadsizeBertEncoder` against stock `BertEncoder`."""


def test_each_left_out_v1_case_keeps_its_v2_twin():
    """Only stock-only cases are left out: each has an `encoder_v2` twin that runs ours."""
    assert len(STOCK_ONLY) == 7
    for name in STOCK_ONLY:
        assert callable(getattr(BertEncoderTest, name.replace("_encoder_v1", "_encoder_v2")))
