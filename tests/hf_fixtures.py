"""A tiny random BERT in Hugging Face layout, for the import tests of both fronts.

`write_checkpoint` writes `model.safetensors`, `config.json` and `vocab.txt`
(2 layers of 4 heads of 4, width 16, `VOCAB`'s 40 WordPiece tokens); its
shapes come from the core (`hf_checkpoint.checkpoint_shapes`), so it needs
neither TensorFlow nor a Keras front. The same seed writes the same bytes.
"""

import json
import pathlib

import numpy as np
from safetensors.numpy import save_file

from headsize_tf.core import hf_checkpoint

CONFIG = {
    "model_type": "bert",
    "vocab_size": 40,
    "hidden_size": 16,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 32,
    "hidden_act": "gelu",
    "max_position_embeddings": 24,
    "type_vocab_size": 2,
    "layer_norm_eps": 1e-12,
}
VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "the",
    "cat",
    "sat",
    "on",
    "mat",
    ".",
    "##s",
    "a",
    "dog",
] + [f"w{i}" for i in range(26)]


def write_checkpoint(
    directory: pathlib.Path,
    config: dict | None = None,
    seed: int = 0,
    pooler: bool = True,
    rename=None,
    extra: dict | None = None,
    drop: str | None = None,
    reshape: str | None = None,
) -> dict[str, np.ndarray]:
    """A random BERT in Hugging Face layout; returns {tensor name: array}.

    Args:
      directory: Where to write (created).
      config: Entries that override `CONFIG` (the shapes follow them).
      seed: The weights' seed (normal, scale 0.2).
      pooler: False leaves out the pooler's tensors.
      rename: Maps each tensor name to the name written.
      extra: Tensors written besides BERT's.
      drop: A tensor name left out.
      reshape: A tensor name written one column short.
    """
    config = dict(CONFIG, **(config or {}))
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    tensors = {
        name: rng.normal(scale=0.2, size=shape).astype(np.float32)
        for name, shape in hf_checkpoint.checkpoint_shapes(config).items()
        if pooler or not name.startswith("pooler.")
    }
    tensors["embeddings.position_ids"] = np.arange(
        config["max_position_embeddings"], dtype=np.int64
    )[None]
    tensors.update(extra or {})
    if drop:
        tensors.pop(drop)
    if reshape:
        tensors[reshape] = tensors[reshape][..., :-1]
    if rename:
        tensors = {rename(name): value for name, value in tensors.items()}
    save_file(tensors, str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps(config))
    (directory / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return tensors
