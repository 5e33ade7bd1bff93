"""The keras-hub bridge: keras-hub's BERT, DistilBERT and GPT-2 in the Keras 3 tools.

`import_hub_model(keras_hub_model)` (a `BertBackbone` /
`BertTextClassifier`, `DistilBertBackbone` / `DistilBertTextClassifier`,
`GPT2Backbone` / `GPT2CausalLM`) and `load_hub_preset(name_or_directory)`
return a `HubModel`: the library's `BertBackbone` or `CausalLM` with
keras-hub's weights (equal outputs), keras-hub's classifier head,
preprocessor and tokenizer kept. Every Keras 3 tool then applies:
`compress_hub_model`, `prune_hub_classifier` / `prune_hub_lm`,
`convert_hub_model` (grouped / latent K/V; `convert_hub_lm` measures,
uptrains and saves a converted GPT-2 with its tokenizer, on text
`hub_lm_text` tokenises), `HubModel.embed` and
`HubModel.generate`. `HubModel.save` writes a keras-hub preset while
keras-hub's blocks express the model, else the library's layout.

keras-hub is the optional `hub` extra (`pip install "headsize-tf[hub]"`);
without it, using the bridge raises `MissingExtraError` naming the extra
(importing this package does not need it).
"""

from headsize_tf.keras3.hub.architectures import ARCHITECTURES, Architecture
from headsize_tf.keras3.hub.classifier_adapter import HubClassifierAdapter
from headsize_tf.keras3.hub.convert import convert_hub_lm, convert_hub_model
from headsize_tf.keras3.hub.hub_model import HubModel
from headsize_tf.keras3.hub.importer import import_hub_model
from headsize_tf.keras3.hub.lm_adapter import HubLMAdapter, hub_lm_text
from headsize_tf.keras3.hub.presets import load_hub_preset
from headsize_tf.keras3.hub.tools import compress_hub_model, prune_hub_classifier, prune_hub_lm
from headsize_tf.keras3.pretrained._keras_hub import EXTRA, MissingExtraError, require_keras_hub

__all__ = [
    "ARCHITECTURES",
    "EXTRA",
    "Architecture",
    "HubClassifierAdapter",
    "HubLMAdapter",
    "HubModel",
    "MissingExtraError",
    "compress_hub_model",
    "convert_hub_lm",
    "convert_hub_model",
    "hub_lm_text",
    "import_hub_model",
    "load_hub_preset",
    "prune_hub_classifier",
    "prune_hub_lm",
    "require_keras_hub",
]
