"""data.gguf_mla_writer: a latent-attention (MLA) decoder as llama.cpp's "deepseek2" GGUF file.

The oracle is llama.cpp's deepseek2 graph written out in numpy
(`deepseek2_logits`, after `src/models/deepseek2.cpp`'s absorbed path),
reading the raw file with `gguf`'s own reader: RMSNorm of the latent,
adjacent-pair RoPE at `freq_base^(-2 i / n_rot)`, the key up-projection
folded into the query, scores scaled by 1 / sqrt(key_length_mla). A tiny
random Llama converted to a latent by `compress_kv` must compute the same
logits from the file. (llama.cpp itself on SmolLM2:
benchmarks/llama_cpp_agreement.py, results/gguf_llama_cpp.)
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
keras = pytest.importorskip("keras")
pytest.importorskip("tokenizers")

from headsize_tf.core.errors import CheckpointError  # noqa: E402
from headsize_tf.core.mla_layer import MlaLayer  # noqa: E402
from headsize_tf.data.gguf_mla_writer import (  # noqa: E402
    LATENT_HEADROOM,
    latent_scale,
    write_gguf_mla,
)
from headsize_tf.keras3.modeling.llama_weights import (  # noqa: E402
    decoder_from_checkpoint,
    mla_checkpoint_from_decoder,
)
from headsize_tf.keras3.pretrained.decoders import save_decoder, tokenizer_of  # noqa: E402
from headsize_tf.keras3.reparam import KVPlan, compress_kv  # noqa: E402
from tests.data.llama_files_test import random_checkpoint, rms_norm, rope_interleaved  # noqa: E402
from tests.data.llama_files_test import tokenizer_json as tokenizer_json  # noqa: E402, F401

IDS = [1, 5, 77, 120, 9, 250, 33, 4, 18, 201, 7, 64]


def deepseek2_logits(path, ids) -> np.ndarray:
    """Logits `[T, vocab]` of a dense "deepseek2" GGUF file as llama.cpp computes them."""
    reader = gguf.GGUFReader(str(path))
    assert reader.fields["general.architecture"].contents() == "deepseek2"

    def meta(key):
        return reader.fields[f"deepseek2.{key}"].contents()

    t = {
        tensor.name: np.asarray(gguf.quants.dequantize(tensor.data, tensor.tensor_type), np.float64)
        for tensor in reader.tensors
    }
    eps, base = meta("attention.layer_norm_rms_epsilon"), meta("rope.freq_base")
    heads, key_length = meta("attention.head_count"), meta("attention.key_length_mla")
    rope_dims, rank = meta("rope.dimension_count"), meta("attention.kv_lora_rank")
    nope = key_length - rope_dims
    x = t["token_embd.weight"][np.asarray(ids)]
    n = len(ids)
    causal = np.tril(np.ones((n, n), bool))
    for i in range(meta("block_count")):
        b = f"blk.{i}."
        a = rms_norm(x, t[b + "attn_norm.weight"], eps)
        q = (a @ t[b + "attn_q.weight"].T).reshape(n, heads, key_length)
        q_nope, q_pe = q[..., :nope], rope_interleaved(q[..., nope:], base)
        kv = a @ t[b + "attn_kv_a_mqa.weight"].T
        k_pe = rope_interleaved(kv[:, None, rank:], base)[:, 0]
        latent = rms_norm(kv[:, :rank], t[b + "attn_kv_a_norm.weight"], eps)
        absorbed = np.einsum("thn,hrn->thr", q_nope, t[b + "attn_k_b.weight"])
        scores = np.einsum("thr,sr->hts", absorbed, latent) + np.einsum("thp,sp->hts", q_pe, k_pe)
        scores = np.where(causal, scores / np.sqrt(key_length), -np.inf)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        mixed = np.einsum("hts,sr->thr", probs, latent)
        out = np.einsum("thr,hvr->thv", mixed, t[b + "attn_v_b.weight"]).reshape(n, -1)
        x = x + out @ t[b + "attn_output.weight"].T
        f = rms_norm(x, t[b + "ffn_norm.weight"], eps)
        gate, up = f @ t[b + "ffn_gate.weight"].T, f @ t[b + "ffn_up.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ t[b + "ffn_down.weight"].T
    x = rms_norm(x, t["output_norm.weight"], eps)
    return x @ t.get("output.weight", t["token_embd.weight"]).T


@pytest.fixture(scope="module")
def source(tokenizer_json):
    """A tiny random Llama (2 layers, 4 query heads of 16, 2 key/value heads) as a DecoderLM."""
    checkpoint = random_checkpoint(tokenizer_json, seed=4)
    return decoder_from_checkpoint(checkpoint, tokenizer=tokenizer_of(checkpoint))


def _logits(lm) -> np.ndarray:
    return keras.ops.convert_to_numpy(lm(np.asarray([IDS], np.int32)))[0]


@pytest.mark.parametrize("fold, frequencies", [(1, [0, 1]), (2, [0, 2])])
def test_a_rotated_high_latent_computes_its_logits_in_llama_cpps_deepseek2(
    tmp_path, source, fold, frequencies
):
    # Half the cache: per layer 2 rotary pairs (the leading component of the 2 fastest bands)
    # and a latent of 28, against 2 key/value heads x 2 x 16.
    lm, report = compress_kv(
        source, KVPlan(0.5, "rotated_high", 1, calibrated=False, rope_fold=fold)
    )
    assert report["rope_components_per_layer"] == [[[0, 0], [1, 0]]] * 2
    assert [list(a.rope_sets[0]) for a in lm.attention_layers] == [frequencies] * 2
    path = save_decoder(lm, tmp_path / "mla.gguf", format="gguf")
    reader = gguf.GGUFReader(str(path))
    assert reader.fields["deepseek2.rope.dimension_count"].contents() == 4
    # Pair i of the file turns at base'^(-2i/4) = the source grid's frequency s i of 16.
    base = reader.fields["deepseek2.rope.freq_base"].contents()
    assert base == pytest.approx(10000.0 ** (2 * fold * 2 / 16), rel=1e-6)
    assert reader.fields["deepseek2.attention.kv_lora_rank"].contents() == 28
    np.testing.assert_allclose(deepseek2_logits(path, IDS), _logits(lm), rtol=0, atol=2e-4)


def test_the_latent_passes_the_norm_in_its_linear_range_and_stays_float32(tmp_path, source):
    lm, _ = compress_kv(source, KVPlan(0.5, "rotated_high", 1, calibrated=False))
    path = save_decoder(lm, tmp_path / "mla-q8.gguf", format="gguf", tensor_type="q8_0")
    reader = gguf.GGUFReader(str(path))
    kinds = {t.name: t.tensor_type.name for t in reader.tensors}
    assert kinds["blk.0.attn_kv_a_mqa.weight"] == "F32"  # Latent rows ~1e-8: no f16 or q8.
    assert kinds["blk.0.attn_q.weight"] == kinds["blk.0.ffn_up.weight"] == "Q8_0"
    assert kinds["blk.0.attn_k_b.weight"] == "F16"  # Rows of 16: not whole Q8_0 blocks.
    # The bound holds on the worst input direction: the latent kernel's top singular vector,
    # scaled to the largest norm output the attention norm can give.
    eps = 1e-6
    layer = lm.attention_layers[0]
    kernel = np.asarray(keras.ops.convert_to_numpy(layer._latent_dense.kernel), np.float64)
    scale = np.asarray(
        keras.ops.convert_to_numpy(lm.transformer_layers[0]._self_attention_layer_norm.scale)
    )
    mla = MlaLayer(
        query=np.zeros([64, 4, 20]),
        latent=kernel,
        rope_key=np.zeros([64, 4]),
        key_up=np.zeros([4, 28, 16]),
        value_up=np.zeros([4, 28, 16]),
        output=np.zeros([4, 16, 64]),
        frequencies=(0, 1),
        grid_size=16,
        query_scale=0.25,
        norm_scale=scale,
    )
    s = latent_scale(mla, eps)
    u, _, _ = np.linalg.svd(kernel)
    worst = u[:, 0] * np.abs(scale).max() * np.sqrt(64)
    assert np.mean((s * worst @ kernel) ** 2) <= LATENT_HEADROOM * eps * (1 + 1e-9)
    gguf_logits = deepseek2_logits(path, IDS)
    assert np.abs(gguf_logits - _logits(lm)).max() < 0.05 * np.abs(_logits(lm)).max()


def test_what_deepseek2_cannot_compute_is_refused_in_one_line(tmp_path, source):
    out = tmp_path / "x.gguf"
    # MHA2MLA's partial RoPE: one rotary key per original key/value head.
    partial, _ = compress_kv(source, KVPlan(0.5, "high", 1, calibrated=False))
    with pytest.raises(CheckpointError, match=r"layer 0 has 2 rotary keys.*rotated_high"):
        save_decoder(partial, out, format="gguf")
    # The writer's own checks, on the parts of a convertible model changed one at a time.
    lm, _ = compress_kv(source, KVPlan(0.5, "rotated_high", 1, calibrated=False))
    checkpoint, layers = mla_checkpoint_from_decoder(lm)
    slow = dataclasses.replace(layers[1], frequencies=(1, 2))  # Not from the fastest.
    with pytest.raises(
        CheckpointError, match=r"evenly spaced from the fastest.*layer 1's are \[1, 2\]"
    ):
        write_gguf_mla(checkpoint, [layers[0], slow], out)
    smaller = dataclasses.replace(  # An allocated budget: a smaller latent in layer 1.
        layers[1],
        latent=layers[1].latent[:, :20],
        key_up=layers[1].key_up[:, :20],
        value_up=layers[1].value_up[:, :20],
    )
    with pytest.raises(CheckpointError, match=r"latent sizes \[20, 28\].*--allocation uniform"):
        write_gguf_mla(checkpoint, [layers[0], smaller], out)
    with pytest.raises(CheckpointError, match=r"1 latent attention layers for a model of 2"):
        write_gguf_mla(checkpoint, layers[:1], out)
    assert not out.exists()
    # More leading bands than the layer has.
    with pytest.raises(Exception, match=r"1 <= pairs kept <= 8"):
        compress_kv(source, KVPlan(1.0, "rotated_high", 5, calibrated=False))


@pytest.mark.parametrize("tensor_type, tolerance", [("f32", 1e-6), ("q8_0", 0.1)])
def test_a_deepseek2_file_reads_back_as_the_latent_model(tmp_path, source, tensor_type, tolerance):
    from headsize_tf.keras3.pretrained.decoders import load_decoder

    lm, _ = compress_kv(source, KVPlan(0.5, "rotated_high", 1, calibrated=False, rope_fold=2))
    path = save_decoder(lm, tmp_path / "mla.gguf", format="gguf", tensor_type=tensor_type)
    back = load_decoder(path)
    layer = back.attention_layers[0]
    assert (layer.kv_latent_dim, layer.num_rope_heads, layer.rope_pairs) == (28, 1, 2)
    want = _logits(lm)  # Relative to the largest logit: q8_0 rounds the matrices to 8 bits.
    assert np.abs(_logits(back) - want).max() <= tolerance * np.abs(want).max()
    text = "Hello world, 12 times."
    assert list(back.tokenizer.tokenize(text)) == list(lm.tokenizer.tokenize(text))
    # And written again: the same file's function.
    again = save_decoder(back, tmp_path / "again.gguf", format="gguf")
    np.testing.assert_allclose(deepseek2_logits(again, IDS), _logits(back), rtol=0, atol=2e-4)


def test_a_deepseek2_file_whose_latent_norm_normalises_is_refused(tmp_path, source, monkeypatch):
    from headsize_tf.data import gguf_mla_writer
    from headsize_tf.data.gguf_llama import read_gguf_llama
    from headsize_tf.data.gguf_mla import read_gguf_mla

    lm, _ = compress_kv(source, KVPlan(0.5, "rotated_high", 1, calibrated=False))
    # DeepSeek-V2's own files normalise the latent: here, a latent scaled only to epsilon.
    monkeypatch.setattr(gguf_mla_writer, "LATENT_HEADROOM", 1.0)
    path = save_decoder(lm, tmp_path / "normed.gguf", format="gguf")
    with pytest.raises(CheckpointError, match=r"layer 0's latent norm normalises"):
        read_gguf_mla(path)
    with pytest.raises(CheckpointError, match=r"'deepseek2' is not supported \(a latent model"):
        read_gguf_llama(path)
