"""File names of a saved `HubModel` that keras-hub cannot express (pruned, converted).

A directory of this layout: `headsize_hub.json` (format, architecture,
source, keras-hub's configs, the head's settings), `model.keras` (the
library's `BertBackbone` or `CausalLM` in Keras' native format), `head.npz`
(a text classifier's logits kernel and bias) and `preprocessor/` (keras-hub's
preprocessor and tokenizer, as its `save_to_preset` writes them). A model
keras-hub can express is saved as a keras-hub preset directory instead.
"""

HUB_FILE = "headsize_hub.json"
FORMAT = "headsize-hub-1"
MODEL_FILE = "model.keras"
HEAD_FILE = "head.npz"
PREPROCESSOR_DIR = "preprocessor"
# Files of a keras-hub preset directory (`save_to_preset`).
PRESET_CONFIG_FILE = "config.json"
PRESET_TASK_FILE = "task.json"
PRESET_TOKENIZER_FILE = "tokenizer.json"
PRESET_PREPROCESSOR_FILE = "preprocessor.json"
