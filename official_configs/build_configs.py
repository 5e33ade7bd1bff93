"""Writes the papers' full-scale experiment configs under official_configs/.

    python official_configs/build_configs.py          # rewrite the YAML files
    python official_configs/build_configs.py --check  # exit 1 if any differs

Families (one directory each, one YAML per model, plus `tiny.yaml`: the same
data pipeline with a model that trains on a laptop CPU):

* `bhojanapalli_lm1b/`: Bhojanapalli et al. (2020) Table 1 / Fig. 1 on LM1B.
  6-layer causal LMs; standard baselines of width 256..512 (8 heads, head size
  width / 8) vs fixed head size 32 at width 256 with the head count whose
  trainable parameters match each baseline (`headsize_tf.params`).
* `bhojanapalli_bert24/`: Table 3. 24-layer BERT masked-LM pretraining:
  BERT-large-style baselines of width 512 / 768 / 1024 (heads of 64) vs width
  512 with head size 128 and 8 / 16 / 32 heads. Reads Model Garden pretraining
  TFRecords (`create_pretraining_data.py`) from `${DATA_DIR}/bert_pretrain/`.
* `cordonnier_nmt/`: Cordonnier et al. (2020) Table 3: transformer-base on
  WMT14 en-de, standard heads vs collaborative heads with shared key dim
  512 / 256 / 128 / 64 (value heads of 64).

Every file is a `--config_file` for `headsize-tf train --experiment` named in
its header; TFDS families need a vocab first (`headsize-tf data vocab`, command
in the header).
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parent


def _trainer(steps: int, lr: float, warmup: int, interval: int, validation_steps: int) -> dict:
    return {
        "train_steps": steps,
        "validation_steps": validation_steps,
        "steps_per_loop": min(interval, 1000),
        "summary_interval": min(interval, 1000),
        "checkpoint_interval": interval,
        "validation_interval": interval,
        "optimizer_config": {
            "learning_rate": {"polynomial": {"initial_learning_rate": lr, "decay_steps": steps}},
            "warmup": {"polynomial": {"warmup_steps": warmup}},
        },
    }


# ------------------------------------------------------------------ LM1B
LM1B_VOCAB = (
    "headsize-tf data vocab --tfds lm1b --features text --output ${DATA_DIR}/lm1b/vocab.txt"
)


def _lm1b_data(seq: int, batch: int) -> dict:
    common = {"tfds_name": "lm1b", "vocab_file": "${DATA_DIR}/lm1b/vocab.txt", "seq_length": seq}
    return {
        "train_data": {**common, "tfds_split": "train", "global_batch_size": batch},
        "validation_data": {
            **common,
            "tfds_split": "test",
            "global_batch_size": batch,
            "is_training": False,
            "drop_remainder": False,
        },
    }


def _lm_model(
    width: int,
    heads: int,
    layers: int = 6,
    head_size: int | None = None,
    vocab: int = 32000,
    seq: int = 256,
) -> dict:
    model = {
        "vocab_size": vocab,
        "hidden_size": width,
        "num_layers": layers,
        "attention": {"kind": "standard", "num_heads": heads},
        "intermediate_size": 4 * width,
        "max_sequence_length": seq,
        "dropout_rate": 0.1,
    }
    if head_size is not None:
        model.update(
            attention={"kind": "fixed_head", "num_heads": heads, "head_size": head_size},
            intermediate_size=1024,
        )
    return model


def lm1b_family() -> dict[str, tuple[str, dict]]:
    from headsize_tf import params

    def count(model: dict) -> int:
        spec = params.EncoderSpec(
            vocab_size=model["vocab_size"],
            width=model["hidden_size"],
            num_layers=model["num_layers"],
            attention=params.AttentionSpec(**model["attention"]),
            intermediate_size=model["intermediate_size"],
            max_sequence_length=model["max_sequence_length"],
        )
        return params.causal_lm_params(spec).trainable

    files = {}
    for width in (256, 320, 384, 448, 512):
        base = _lm_model(width, 8)
        target = count(base)
        heads = params.match_num_heads(
            target, lambda h: count(_lm_model(256, h, head_size=32)), range(1, 257)
        )
        fixed = _lm_model(256, heads, head_size=32)
        pairs = [(f"baseline_w{width}", base), (f"fixed32_w256_h{heads}", fixed)]
        if heads * 32 == width:  # 8 heads of 32 at width 256 *is* baseline_w256.
            pairs = pairs[:1]
        for name, model in pairs:
            note = f"{count(model):,} trainable parameters" + (
                "" if model is base else f" (matches baseline_w{width}: {target:,})"
            )
            files[name] = (
                note,
                {
                    "task": {"model": model, **_lm1b_data(256, 128)},
                    "trainer": _trainer(250000, 1e-3, 10000, 5000, 100),
                },
            )
    tiny = {
        "task": {
            "model": _lm_model(64, 4, layers=2, vocab=8000, seq=128) | {"dropout_rate": 0.0},
            **_lm1b_data(128, 32),
        },
        "trainer": _trainer(200, 2e-3, 20, 100, 5),
    }
    files["tiny"] = ("width 64, 2 layers, vocab 8000: a CPU-sized check of the pipeline", tiny)
    return files


# ------------------------------------------------------------- BERT 24
def _bert_encoder(
    width: int, heads: int, head_size: int | None = None, layers: int = 24, vocab: int = 30522
) -> dict:
    enc = {
        "vocab_size": vocab,
        "hidden_size": width,
        "num_layers": layers,
        "attention": {"kind": "standard", "num_heads": heads},
        "intermediate_size": 4 * width,
        "max_position_embeddings": 512,
        "dropout_rate": 0.1,
        "attention_dropout_rate": 0.1,
    }
    if head_size is not None:
        enc.update(attention={"kind": "fixed_head", "num_heads": heads, "head_size": head_size})
    return {"encoder": {"type": "any", "any": enc}}


def _bert_data(batch: int, seq: int = 128, predictions: int = 20) -> dict:
    common = {"global_batch_size": batch, "seq_length": seq, "max_predictions_per_seq": predictions}
    return {
        "train_data": {"input_path": "${DATA_DIR}/bert_pretrain/train-*.tfrecord", **common},
        "validation_data": {
            "input_path": "${DATA_DIR}/bert_pretrain/valid-*.tfrecord",
            **common,
            "is_training": False,
        },
    }


def bert24_family() -> dict[str, tuple[str, dict]]:
    from headsize_tf import params

    def count(model: dict) -> int:
        enc = model["encoder"]["any"]
        spec = params.EncoderSpec(
            vocab_size=enc["vocab_size"],
            width=enc["hidden_size"],
            num_layers=enc["num_layers"],
            attention=params.AttentionSpec(**enc["attention"]),
            intermediate_size=enc["intermediate_size"],
        )
        return params.encoder_params(spec).trainable

    models = {f"baseline_w{w}_h{w // 64}": _bert_encoder(w, w // 64) for w in (512, 768, 1024)}
    models |= {f"fixed128_w512_h{h}": _bert_encoder(512, h, head_size=128) for h in (8, 16, 32)}
    files = {
        name: (
            f"{count(model):,} encoder parameters",
            {
                "task": {"model": model, **_bert_data(256)},
                "trainer": _trainer(1000000, 1e-4, 10000, 10000, 100),
            },
        )
        for name, model in models.items()
    }
    tiny_model = _bert_encoder(64, 4, layers=2, vocab=30522)
    tiny_model["encoder"]["any"].update(intermediate_size=256, max_position_embeddings=128)
    files["tiny"] = (
        "width 64, 2 layers: a CPU-sized check of the pipeline",
        {
            "task": {"model": tiny_model, **_bert_data(32)},
            "trainer": _trainer(200, 2e-3, 20, 100, 5),
        },
    )
    return files


# ------------------------------------------------------------------ NMT
NMT_VOCAB = (
    "headsize-tf data vocab --tfds wmt14_translate/de-en --features en de "
    "--output ${DATA_DIR}/wmt14/vocab.txt"
)


def _nmt_data(batch: int, seq: int) -> dict:
    common = {
        "tfds_name": "wmt14_translate/de-en",
        "src_lang": "en",
        "tgt_lang": "de",
        "vocab_file": "${DATA_DIR}/wmt14/vocab.txt",
        "max_seq_length": seq,
    }
    return {
        "train_data": {**common, "tfds_split": "train", "global_batch_size": batch},
        "validation_data": {
            **common,
            "tfds_split": "validation",
            "global_batch_size": batch,
            "is_training": False,
            "drop_remainder": False,
        },
    }


def nmt_family() -> dict[str, tuple[str, dict]]:
    base = {
        "vocab_size": 32000,
        "hidden_size": 512,
        "num_encoder_layers": 6,
        "num_decoder_layers": 6,
        "attention": {"kind": "standard", "num_heads": 8},
        "intermediate_size": 2048,
        "max_sequence_length": 128,
        "dropout_rate": 0.1,
        "attention_dropout_rate": 0.1,
    }
    models = {"standard": base}
    for dim in (512, 256, 128, 64):
        models[f"collaborative_dk{dim}"] = dict(
            base,
            attention={
                "kind": "collaborative",
                "num_heads": 8,
                "shared_key_dim": dim,
                "head_size": 64,
            },
        )
    files = {
        name: (
            "transformer-base (Vaswani et al.) with label smoothing 0.1",
            {
                "task": {"model": model, "label_smoothing": 0.1, **_nmt_data(256, 128)},
                "trainer": _trainer(100000, 7e-4, 4000, 5000, 100),
            },
        )
        for name, model in models.items()
    }
    tiny = dict(
        base,
        vocab_size=8000,
        hidden_size=64,
        num_encoder_layers=2,
        num_decoder_layers=2,
        attention={"kind": "standard", "num_heads": 4},
        intermediate_size=256,
        max_sequence_length=64,
        dropout_rate=0.0,
        attention_dropout_rate=0.0,
    )
    files["tiny"] = (
        "width 64, 2 + 2 layers: a CPU-sized check of the pipeline",
        {
            "task": {"model": tiny, "label_smoothing": 0.1, **_nmt_data(32, 64)},
            "trainer": _trainer(200, 2e-3, 20, 100, 5),
        },
    )
    return files


@dataclasses.dataclass(frozen=True)
class Family:
    directory: str
    experiment: str
    title: str
    prepare: str
    build: object


FAMILIES = (
    Family(
        "bhojanapalli_lm1b",
        "headsize_lm/language_modeling",
        "Bhojanapalli et al. (2020), LM1B 6-layer LMs (Table 1, Fig. 1)",
        LM1B_VOCAB,
        lm1b_family,
    ),
    Family(
        "bhojanapalli_bert24",
        "headsize_bert/pretraining",
        "Bhojanapalli et al. (2020), 24-layer BERT pretraining (Table 3)",
        "Model Garden's create_pretraining_data.py (Wikipedia + BooksCorpus) -> "
        "${DATA_DIR}/bert_pretrain/{train,valid}-*.tfrecord",
        bert24_family,
    ),
    Family(
        "cordonnier_nmt",
        "headsize_seq2seq/translation",
        "Cordonnier et al. (2020), WMT14 en-de transformer-base (Table 3)",
        NMT_VOCAB,
        nmt_family,
    ),
)


def render() -> dict[pathlib.Path, str]:
    """Every config file's path and text."""
    out = {}
    for family in FAMILIES:
        for name, (note, config) in family.build().items():
            path = ROOT / family.directory / f"{name}.yaml"
            header = [
                f"# {family.title}: {name} ({note}).",
                "# Generated by official_configs/build_configs.py; edit that, not this file.",
                f"# Data: {family.prepare}",
                f"# Run:  headsize-tf train --experiment {family.experiment} \\",
                f"#         --config_file official_configs/{family.directory}/{name}.yaml "
                "--model_dir DIR",
            ]
            out[path] = "\n".join(header) + "\n" + yaml.safe_dump(config, sort_keys=False)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a file differs")
    args = parser.parse_args(argv)
    stale = []
    for path, text in render().items():
        if path.exists() and path.read_text() == text:
            continue
        stale.append(path)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    for path in stale:
        print(("stale: " if args.check else "wrote: ") + str(path.relative_to(ROOT.parent)))
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
