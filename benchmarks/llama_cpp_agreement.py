"""GGUF files written by `write_gguf_llama`, run by llama.cpp itself: logits and token ids.

llama.cpp (through the `llama-cpp-python` bindings, in an environment of their own:
the project does not depend on them) loads each file the library writes and
scores the same 128 ids of Northanger Abbey's held-out text; its logits are
compared with the library's `DecoderLM` of the same checkpoint (max |diff| /
max |logit|, argmax agreement). llama.cpp runs with a float32 KV cache (its
default float16 cache adds about 1e-3 of relative noise).

Models:

* SmolLM2-135M-Instruct (the registered 4-bit GGUF, dequantised), written as
  float32 and as q8_0 (the q8_0 file read back by the library: the two
  implementations of one quantised file);
* SmolLM2 pruned layer by layer (`--pruned FILE.keras`, e.g. `headsize-tf prune
  --decoder ... --output DIR`'s `DIR/model.keras`; without it, a fixed mask
  dropping 0-2 key/value groups per layer): llama.cpp's "deci" architecture;
* SmolLM2 with every head of layers 10 and 20 pruned (and 0-2 groups of the
  others): those two layers are written attention-free ("deci" layers without
  heads, attention tensors or KV cache);
* SmolLM2 converted to a shared latent (`--latent FILE.keras`, e.g. `headsize-tf
  convert --decoder ... --to latent --cache-fraction 0.3125 --rope-strategy
  rotated_high ... --output DIR`'s model; without it, the same conversion of the
  weights alone, 4 rotary pairs from bands of 2): llama.cpp's "deepseek2" (MLA),
  float32 and q8_0;
* tiny random Qwen2 (biases), Qwen3 (query/key norms), Gemma 2 (window 16 of the
  128 positions, logit caps) and Gemma 3 (query/key norms, a local RoPE base)
  over SmolLM2's tokenizer.

Token ids: llama.cpp's tokenizer of the written SmolLM2 file against the library's
on the writer's probe texts and 64 passages of Northanger Abbey (6 lines each); and for a
SentencePiece vocabulary (trained here on Austen's text with Llama's settings,
written the way llama.cpp's converter writes one, read, and written again by the
library, which ranks the pieces by its merges), llama.cpp's ids against
`sentencepiece`'s own on the same texts.

Usage (llama-cpp-python built in another environment, e.g. `python -m venv /tmp/lcpp &&
/tmp/lcpp/bin/pip install llama-cpp-python numpy`):

  python benchmarks/llama_cpp_agreement.py --llama-python /tmp/lcpp/bin/python \\
      --output results/gguf_llama_cpp [--pruned /tmp/smollm2_pruned/model.keras] \\
      [--latent /tmp/smollm2_mla/model.keras]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

# Runs in llama-cpp-python's environment: logits of each job's ids, token ids of each text.
LLAMA_CPP_CHILD = r"""
import json, sys
import numpy as np
from llama_cpp import Llama

jobs = json.load(open(sys.argv[1]))
for job in jobs:
    llm = Llama(model_path=job["gguf"], logits_all=True, n_ctx=512, n_batch=512, n_threads=2,
                type_k=0, type_v=0, flash_attn=False, verbose=False)  # type 0: float32 cache
    if job.get("ids"):
        llm.eval(job["ids"])
        np.save(job["logits"], np.array(llm.scores[: len(job["ids"])], np.float32))
    if job.get("texts"):
        ids = [llm.tokenize(t.encode(), add_bos=False, special=False) for t in job["texts"]]
        json.dump(ids, open(job["tokens"], "w"))
    del llm
print("done")
"""
TOKENS = 128


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-python", required=True, help="python with llama_cpp")
    parser.add_argument("--output", required=True)
    parser.add_argument("--pruned", default=None, help="a pruned DecoderLM .keras file")
    parser.add_argument("--latent", default=None, help="a latent (MLA) DecoderLM .keras file")
    args = parser.parse_args(argv)

    import numpy as np

    from headsize_tf.core.io import write_json
    from headsize_tf.data.gguf_llama_writer import PROBE_TEXTS
    from headsize_tf.data.plain_text import plain_text
    from headsize_tf.keras3.pretrained.decoder_text import decoder_lm_text
    from headsize_tf.keras3.pretrained.decoders import load_decoder

    start = time.perf_counter()
    lm = load_decoder("smollm2-135m-instruct-q4")
    text = decoder_lm_text(lm, TOKENS, corpus="austen", max_held_out_windows=1, train=False)
    ids = [int(i) for i in np.asarray(text.held_out)[0]]
    texts = [*PROBE_TEXTS, *_passages(plain_text("austen", "valid"), 64)]

    with tempfile.TemporaryDirectory(prefix="llama_cpp_agreement_") as tmp:
        result = _compare(args, argv, lm, ids, texts, pathlib.Path(tmp))
    result["text"] = text.source
    result["seconds"] = round(time.perf_counter() - start, 1)
    out = pathlib.Path(args.output)
    write_json(out / "agreement.json", result)
    print(f"wrote {out / 'agreement.json'} in {result['seconds']:.0f} s")
    return 0


def _passages(lines: list[str], count: int, size: int = 6) -> list[str]:
    """`count` passages of `size` consecutive lines each (newlines kept) from `lines`."""
    return ["\n".join(lines[i : i + size]) for i in range(0, count * size, size)]


def _compare(args, argv, lm, ids, texts, tmp: pathlib.Path) -> dict:
    """Writes the files, runs llama.cpp on them, compares (module docstring)."""
    import keras
    import numpy as np

    from headsize_tf.data.plain_text import plain_text
    from headsize_tf.keras3.pretrained.decoders import load_decoder, save_decoder
    from headsize_tf.keras3.reparam.lm_file import kv_bytes_per_token

    models = {"SmolLM2-135M f32": (lm, save_decoder(lm, tmp / "smollm2.gguf", "gguf"))}
    q8 = save_decoder(lm, tmp / "smollm2_q8_0.gguf", "gguf", tensor_type="q8_0")
    models["SmolLM2-135M q8_0"] = (load_decoder(q8), q8)
    pruned = load_decoder(args.pruned) if args.pruned else _pruned(lm)
    models["SmolLM2-135M pruned (deci)"] = (
        pruned,
        save_decoder(pruned, tmp / "pruned.gguf", "gguf"),
    )
    emptied = _pruned(lm, empty=(10, 20))
    models["SmolLM2-135M pruned, layers 10 and 20 attention-free (deci)"] = (
        emptied,
        save_decoder(emptied, tmp / "emptied.gguf", "gguf"),
    )
    latent = load_decoder(args.latent) if args.latent else _latent(lm)
    models["SmolLM2-135M latent (deepseek2)"] = (
        latent,
        save_decoder(latent, tmp / "latent.gguf", "gguf"),
    )
    latent_q8 = save_decoder(latent, tmp / "latent_q8_0.gguf", "gguf", tensor_type="q8_0")
    models["SmolLM2-135M latent (deepseek2), q8_0 against float32"] = (latent, latent_q8)
    for name, tiny in _tiny_models(lm).items():
        models[name] = (tiny, save_decoder(tiny, tmp / f"{name}.gguf", "gguf"))
    spm_path, spm_processor = _sentencepiece_file(tmp, plain_text("austen", "train"))

    jobs = [
        {"gguf": str(path), "ids": ids, "logits": str(tmp / f"{i}.npy")}
        for i, (_, path) in enumerate(models.values())
    ]
    jobs[0].update(texts=texts, tokens=str(tmp / "smollm2_tokens.json"))
    jobs.append({"gguf": str(spm_path), "texts": texts, "tokens": str(tmp / "spm_tokens.json")})
    (tmp / "jobs.json").write_text(json.dumps(jobs))
    (tmp / "child.py").write_text(LLAMA_CPP_CHILD)
    print(f"running llama.cpp on {len(jobs)} files ...", flush=True)
    done = subprocess.run(
        [args.llama_python, str(tmp / "child.py"), str(tmp / "jobs.json")],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise SystemExit(f"llama.cpp failed: {done.stderr[-3000:]}")
    from _common import llama_cpp_version

    version = llama_cpp_version(args.llama_python)

    rows = []
    for (name, (model, path)), job in zip(models.items(), jobs, strict=False):
        ours = keras.ops.convert_to_numpy(model(np.asarray([ids], np.int32)))[0]
        theirs = np.load(job["logits"])
        layers = model.attention_layers
        rows.append(
            {
                "model": name,
                "file_mb": round(path.stat().st_size / 2**20, 1),
                "query_heads": [layer.num_heads for layer in layers],
                "kv_heads": [getattr(layer, "num_kv_heads", layer.num_heads) for layer in layers],
                "cache_values_per_token": kv_bytes_per_token(model) // 4,  # float32 models
                "max_abs_diff": float(np.abs(ours - theirs).max()),
                "max_abs_logit": float(np.abs(ours).max()),
                "relative": float(np.abs(ours - theirs).max() / np.abs(ours).max()),
                "argmax_agreement": float(np.mean(ours.argmax(-1) == theirs.argmax(-1))),
            }
        )
        print(rows[-1]["model"], f"{rows[-1]['relative']:.2e}", rows[-1]["argmax_agreement"])
    cpp_tokens = json.loads((tmp / "smollm2_tokens.json").read_text())
    ours_tokens = [lm.tokenizer.tokenize(t) for t in texts]
    spm_tokens = json.loads((tmp / "spm_tokens.json").read_text())
    tokens = {
        "texts": len(texts),
        "smollm2_equal": sum(a == list(b) for a, b in zip(cpp_tokens, ours_tokens, strict=True)),
        "sentencepiece_equal": sum(
            a == spm_processor.encode(t) for a, t in zip(spm_tokens, texts, strict=True)
        ),
        "ids_compared": sum(len(a) for a in cpp_tokens),
    }
    print("token ids:", tokens, flush=True)
    f32, q8 = np.load(jobs[0]["logits"]), np.load(jobs[1]["logits"])
    context = {  # llama.cpp's own 8-bit file against its float32 one: q8_0 products
        # quantise the activations to 8 bits too.
        "relative": float(np.abs(f32 - q8).max() / np.abs(f32).max()),
        "argmax_agreement": float(np.mean(f32.argmax(-1) == q8.argmax(-1))),
    }
    command = "python benchmarks/llama_cpp_agreement.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    return {
        "command": command.strip(),
        "llama_cpp_python": version,
        "keras_backend": keras.backend.backend(),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus",
        "tokens_scored": len(ids),
        "logits": rows,
        "llama_cpp_q8_0_against_its_f32": context,
        "token_ids": tokens,
    }


def _pruned(lm, empty: tuple[int, ...] = ()):
    """SmolLM2 with 0-2 of its 3 key/value groups dropped per layer (a fixed pattern), and
    every head of the layers `empty`."""
    import numpy as np

    from headsize_tf.keras3.pruning import remove_heads

    mask = np.ones([lm.num_layers, 9], np.float32)
    for i in range(lm.num_layers):
        for group in range(i % 3):
            mask[i, 3 * group : 3 * group + 3] = 0
    mask[list(empty)] = 0
    return remove_heads(lm, mask)


def _latent(lm):
    """SmolLM2 as a latent at 31.25% of its cache, from its weights alone (DeepSeek-V2's
    rotary key: the leading rotated pair of the 12 fastest bands of 2 frequencies)."""
    from headsize_tf.keras3.reparam import KVPlan, compress_kv

    plan = KVPlan(0.3125, "rotated_high", 4, calibrated=False, rope_fold=2)
    return compress_kv(lm, plan)[0]


def _tiny_models(lm) -> dict:
    """Tiny random Qwen2, Qwen3, Gemma 2 and Gemma 3 decoders over SmolLM2's tokenizer."""
    import numpy as np

    from headsize_tf.core.llama_checkpoint import LlamaCheckpoint, LlamaConfig, weight_shapes
    from headsize_tf.keras3.modeling.llama_weights import (
        checkpoint_from_decoder,
        decoder_from_checkpoint,
    )
    from headsize_tf.keras3.pretrained.decoders import tokenizer_of

    base = dict(
        vocabulary_size=lm.vocabulary_size,
        num_layers=4,
        hidden_dim=64,
        num_query_heads=4,
        num_key_value_heads=2,
        intermediate_dim=128,
        head_dim=16,
        max_sequence_length=512,
        rms_norm_epsilon=1e-6,
        bos_token_id=1,
        eos_token_id=2,
    )
    gemma = dict(hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True)
    configs = {
        "tiny Qwen2": LlamaConfig(model_type="qwen2", attention_bias=True, **base),
        "tiny Qwen3": LlamaConfig(model_type="qwen3", qk_norm=True, **base),
        "tiny Gemma 2": LlamaConfig(
            model_type="gemma2",
            sliding_window=16,
            sliding_window_layers=(True, False, True, False),
            attention_logit_soft_cap=50.0,
            final_logit_soft_cap=30.0,
            **gemma,
            **base,
        ),
        "tiny Gemma 3": LlamaConfig(
            model_type="gemma3_text",
            qk_norm=True,
            sliding_window=16,
            sliding_window_layers=(True, True, True, False),
            rope_max_wavelength=1e6,
            local_rope_max_wavelength=1e4,
            **gemma,
            **base,
        ),
    }
    rng = np.random.default_rng(0)
    source = checkpoint_from_decoder(lm)
    models = {}
    for name, config in configs.items():
        weights = {
            key: (0.3 * rng.standard_normal(shape)).astype(np.float32)
            for key, shape in weight_shapes(config).items()
        }
        checkpoint = LlamaCheckpoint(
            config, weights, tokenizer_json=source.tokenizer_json, source=name
        )
        models[name] = decoder_from_checkpoint(checkpoint, tokenizer=tokenizer_of(checkpoint))
    return models


def _sentencepiece_file(tmp: pathlib.Path, lines: list[str]):
    """A SentencePiece BPE trained on `lines` (Llama's settings): its pieces, scores and
    types as llama.cpp's converter copies them into GGUF metadata, read by the library,
    then written by it (scores re-derived from the merges) with a tiny random Llama; and
    the `sentencepiece` processor."""
    import numpy as np
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2

    from headsize_tf.core.llama_checkpoint import LlamaCheckpoint, LlamaConfig, weight_shapes
    from headsize_tf.data.gguf_llama import tokenizer_json_of_metadata
    from headsize_tf.data.gguf_llama_writer import write_gguf_llama

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=model,
        vocab_size=2000,
        model_type="bpe",
        byte_fallback=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        allow_whitespace_only_pieces=True,
        split_digits=True,
        character_coverage=1.0,
        minloglevel=2,
    )
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model.getvalue())
    metadata = {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": [piece.piece for piece in proto.pieces],
        "tokenizer.ggml.scores": [piece.score for piece in proto.pieces],
        "tokenizer.ggml.token_type": [int(piece.type) for piece in proto.pieces],
    }
    config = LlamaConfig(
        model_type="llama",
        vocabulary_size=len(proto.pieces),
        num_layers=1,
        hidden_dim=32,
        num_query_heads=2,
        num_key_value_heads=2,
        intermediate_dim=32,
        bos_token_id=1,
        eos_token_id=2,
    )
    rng = np.random.default_rng(0)
    weights = {
        name: rng.standard_normal(shape).astype(np.float32)
        for name, shape in weight_shapes(config).items()
    }
    checkpoint = LlamaCheckpoint(
        config, weights, tokenizer_json=tokenizer_json_of_metadata(metadata), source="spm"
    )
    path = write_gguf_llama(checkpoint, tmp / "sentencepiece.gguf")
    return path, spm.SentencePieceProcessor(model_proto=model.getvalue())


if __name__ == "__main__":
    sys.exit(main())
