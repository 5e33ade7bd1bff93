"""The decoder commands end to end on a tiny GGUF model, and their bad inputs (exit 2, one line).

`generate`, `convert --decoder` and `prune --decoder` run in process
(`headsize_tf.cli.main`) on a tiny random Llama written as llama.cpp writes it
(q/k rows permuted, a byte-level BPE with SmolLM2's pre-tokenizer); the real
SmolLM2 is tests/keras3/pretrained/smollm2_test.py's.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from headsize_tf import cli
from headsize_tf.data.hf_llama_dir import write_hf_llama_dir
from tests.data.llama_files_test import random_checkpoint, write_gguf, write_q8_1_norm
from tests.data.llama_files_test import tokenizer_json as tokenizer_json_fixture

tokenizer_json = tokenizer_json_fixture  # The tiny byte-level BPE (a module fixture).

TEXT = [f"Line {i}: the quick brown fox jumps over the lazy dog {i % 7} times." for i in range(400)]


@pytest.fixture(scope="module")
def files(tmp_path_factory, tokenizer_json):
    root = tmp_path_factory.mktemp("decoders")
    checkpoint = random_checkpoint(tokenizer_json)
    good = write_gguf(root / "tiny.gguf", checkpoint)
    truncated = root / "truncated.gguf"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    not_gguf = root / "notes.gguf"
    not_gguf.write_text("not a GGUF file\n")
    hf = write_hf_llama_dir(checkpoint, root / "hf")
    no_tokenizer = root / "hf_no_tokenizer"
    shutil.copytree(hf, no_tokenizer)
    (no_tokenizer / "tokenizer.json").unlink()
    from headsize_tf.keras3.modeling import CausalLM

    lm = CausalLM(vocabulary_size=50, num_layers=1, hidden_dim=16, max_sequence_length=32)
    lm.save(root / "lm.keras")
    text = root / "text.txt"
    text.write_text("\n".join(TEXT) + "\n")
    from headsize_tf.keras3.pretrained.decoders import load_decoder

    load_decoder(good).save(root / "decoder.keras")  # A DecoderLM with its tokenizer.
    (root / "not_zip.keras").write_text("not a zip archive\n")
    (root / "binary_vocab.txt").write_bytes(b"\xff\xfe[UNK]\n")
    (root / "empty.txt").write_text("")
    (root / "afile").write_text("a file, not a directory\n")
    (root / "dir.gguf").mkdir()
    (root / "link").symlink_to(root / "dir.gguf")
    return {
        "gguf": str(good),
        "gpt2": str(write_gguf(root / "gpt2.gguf", checkpoint, architecture="gpt2")),
        "truncated": str(truncated),
        "not_gguf": str(not_gguf),
        "q8_1": str(write_q8_1_norm(root / "q8_1.gguf", checkpoint)),
        "hf": str(hf),
        "no_tokenizer": str(no_tokenizer),
        "text": str(text),
        "long": "word " * 80,  # The tiny model has 64 positions.
        "root": str(root),
    }


CONVERT = ["convert", "--decoder", "{gguf}", "--to", "grouped", "--output", "{out}"]
LATENT = ["convert", "--decoder", "{gguf}", "--to", "latent", "--data-file", "{text}"]
LATENT += ["--sequence-length", "16", "--output", "{out}"]
LM_FILE_LATENT = ["convert", "--model-file", "{root}/lm.keras", "--to", "latent"]
CASES = [
    (
        "gguf_of_another_architecture",
        ["generate", "--decoder", "{gpt2}", "--prompt", "a"],
        "architecture 'gpt2' is not supported; expected one of ['deci', 'gemma', 'gemma2', 'gemma3', 'llama', 'qwen2', 'qwen3']",
    ),
    (
        "truncated_gguf",
        ["generate", "--decoder", "{truncated}", "--prompt", "a"],
        "is not a readable GGUF file",
    ),
    (
        "not_a_gguf",
        ["generate", "--decoder", "{not_gguf}", "--prompt", "a"],
        "is not a readable GGUF file",
    ),
    (
        "quantization_gguf_cannot_read",
        ["generate", "--decoder", "{q8_1}", "--prompt", "a"],
        "Q8_1, which gguf cannot dequantize",
    ),
    (
        "hf_directory_without_tokenizer",
        ["generate", "--decoder", "{no_tokenizer}", "--prompt", "a"],
        "has no tokenizer.json",
    ),
    (
        "prompt_longer_than_the_positions",
        ["generate", "--decoder", "{gguf}", "--prompt", "{long}"],
        "exceeds max_sequence_length 64",
    ),
    (
        "kv_heads_not_dividing_the_query_heads",
        [*CONVERT, "--kv-heads", "3"],
        "--kv-heads 3 does not divide num_heads=4",
    ),
    (
        "svd_on_a_rotary_model",
        [*CONVERT, "--kv-heads", "1", "--method", "svd"],
        "--method svd re-bases key dimensions",
    ),
    (
        "unknown_decoder",
        ["generate", "--decoder", "no-such-model", "--prompt", "a"],
        "is neither a registered decoder",
    ),
    (
        "rope_strategy_on_a_model_without_rope",
        LM_FILE_LATENT
        + ["--cache-fraction", "0.25", "--rope-strategy", "high", "--output", "{out}"],
        "--rope-strategy keeps rotary pairs (RoPE) beside the latent, but",
    ),
    (
        "calibration_of_a_model_without_rope_without_text",
        LM_FILE_LATENT + ["--cache-fraction", "0.25", "--output", "{out}"],
        "--calibration activations measures the model on text: pass --corpus or --data-file "
        "(or --calibration weights).",
    ),
    (
        "a_budget_for_a_model_dir",
        ["convert", "--model-dir", "{root}", "--to", "latent", "--cache-fraction", "0.5"]
        + ["--output", "{out}"],
        "--cache-fraction is on the Keras 3 front",
    ),
    (
        "rope_strategy_without_a_budget_on_a_model_without_rope",
        [*LM_FILE_LATENT, "--kv-rank", "4"] + ["--rope-strategy", "rotated", "--output", "{out}"],
        "--rope-strategy shapes a KV cache at a budget: it needs --cache-fraction",
    ),
    (
        "calibration_without_a_budget",
        [*LM_FILE_LATENT, "--kv-rank", "4"] + ["--calibration", "activations", "--output", "{out}"],
        "--calibration shapes a KV cache at a budget: it needs --cache-fraction",
    ),
    (
        "more_rotary_pairs_than_a_head_has",
        [*LATENT, "--cache-fraction", "0.5", "--rope-pairs", "9"],
        "rope_pairs=9: a head of size 16 has 8 frequency pairs",
    ),
    (
        "a_fold_not_dividing_a_head_s_pairs",
        [*LATENT, "--cache-fraction", "0.5", "--rope-pairs", "2", "--rope-strategy", "rotated"]
        + ["--rope-fold", "3", "--calibration", "weights"],
        "rope_fold=3: a fold must divide a head's 8 frequency pairs (one of [1, 2, 4, 8])",
    ),
    (
        "more_leading_bands_than_a_head_has",
        [*LATENT, "--cache-fraction", "0.5", "--rope-pairs", "5"]
        + ["--rope-strategy", "rotated_high", "--calibration", "weights"],
        "needs 1 <= pairs kept <= 8 (the layer's bands of 1 frequencies); got 10.",
    ),
    (
        "a_fold_without_rotated_rope",
        [*LATENT, "--cache-fraction", "0.5", "--rope-pairs", "2", "--rope-fold", "2"],
        "rope_fold must be an int >= 1, above 1 only with the rotated strategy",
    ),
    (
        "allocation_by_sensitivity_with_a_split_svd",
        [*LATENT, "--cache-fraction", "0.5", "--rope-pairs", "2", "--method", "split_svd"]
        + ["--allocation", "sensitivity"],
        "allocation='sensitivity' needs the joint SVD",
    ),
    (
        "allocation_by_sensitivity_without_text",
        ["convert", "--decoder", "{gguf}", "--to", "latent", "--output", "{out}"]
        + ["--cache-fraction", "0.5", "--rope-pairs", "2", "--rope-strategy", "high"]
        + ["--calibration", "weights", "--allocation", "sensitivity"],
        "--allocation sensitivity measures the model on text: pass --corpus or --data-file.",
    ),
    (
        "budget_below_the_rotary_keys",
        [*LATENT, "--cache-fraction", "0.1", "--rope-pairs", "2"],
        "is no more than the rotary keys' own 8",
    ),
    (
        "state_dir_for_a_model_dir",
        ["convert", "--model-dir", "{root}", "--to", "grouped", "--kv-heads", "1"]
        + ["--output", "{out}", "--state-dir", "{root}/state"],
        "--state-dir is for Keras 3 LMs",
    ),
    (
        "cache_fraction_for_collaborative_heads",
        ["convert", "--decoder", "{gguf}", "--to", "collaborative", "--cache-fraction", "0.5"]
        + ["--output", "{out}"],
        "--cache-fraction sizes a KV cache: --to latent or --to grouped",
    ),
    (
        "grouped_budget_by_svd",
        [*CONVERT, "--cache-fraction", "0.75", "--method", "svd"],
        "pools the keys by mean (--method mean or svd_values); --method svd re-bases",
    ),
    (
        "latent_flag_on_a_grouped_budget",
        [*CONVERT, "--cache-fraction", "0.75", "--rope-pairs", "9"],
        "--rope-pairs shapes a latent's rotary keys (--to latent); --to grouped --cache-fraction",
    ),
    (
        "grouped_budget_below_one_kv_head",
        [*CONVERT, "--cache-fraction", "0.25", "--calibration", "weights"],
        "below grouped K/V's smallest, one key/value head per layer (0.5)",
    ),
    (
        "latent_method_that_does_not_exist",
        [*LATENT, "--cache-fraction", "0.5", "--method", "joint"],
        "--method 'joint' is not a latent method",
    ),
    (
        "calibration_text_too_short",
        [*LATENT, "--cache-fraction", "0.5", "--calibration-windows", "100000"],
        "--calibration-windows 100000 asks for more",
    ),
    (
        "gguf_export_of_a_model_dir",
        ["export", "--model-dir", "{root}", "--task", "lm", "--format", "gguf"]
        + ["--output", "{out}"],
        "--format gguf writes a pretrained or saved decoder: pass --decoder",
    ),
    (
        "gguf_export_to_a_path_without_the_suffix",
        ["export", "--decoder", "{gguf}", "--task", "lm", "--format", "gguf", "--output", "{out}"],
        "--format gguf writes a .gguf file; got --output",
    ),
    (
        "gguf_type_without_gguf",
        ["export", "--decoder", "{gguf}", "--task", "lm", "--gguf-type", "q8_0"]
        + ["--output", "{out}"],
        "--gguf-type q8_0 is for --format gguf.",
    ),
    (
        "model_dir_batches_for_a_decoder",
        ["prune", "--decoder", "{gguf}", "--data-file", "{text}", "--eval-batches", "4"]
        + ["--output", "{out}"],
        "--eval-batches counts a --model-dir's batches; other models take --importance-examples.",
    ),
    (
        "heal_steps_on_a_model_dir",
        ["prune", "--model-dir", "{root}", "--heal-steps", "5", "--output", "{out}"],
        "--heal-steps heals a pruned --decoder; other models fine-tune instead.",
    ),
    (
        "heal_windows_beyond_the_text",
        ["prune", "--decoder", "{gguf}", "--data-file", "{text}", "--heal-steps", "5"]
        + ["--heal-windows", "100000", "--output", "{out}"],
        "--heal-windows 100000 asks for more training windows than the text has",
    ),
    (
        "kv_group_unit_on_a_model_dir",
        ["prune", "--model-dir", "{root}", "--unit", "kv_group", "--output", "{out}"],
        "--unit kv_group prunes a --decoder's key/value groups",
    ),
    (
        "a_decoder_keras_file_as_model_file",
        ["convert", "--model-file", "{root}/decoder.keras", "--to", "grouped", "--kv-heads", "1"]
        + ["--output", "{out}"],
        "holds a DecoderLM (a Llama-family decoder with its own tokenizer); pass it as --decoder",
    ),
    (
        "a_decoder_keras_file_exported_as_a_causal_lm",
        ["export", "--model-file", "{root}/decoder.keras", "--task", "lm", "--vocab-file"]
        + ["{text}", "--output", "{out}"],
        "holds a DecoderLM (a Llama-family decoder with its own tokenizer); export it with --decoder",
    ),
    (
        "more_positions_than_the_decoder_has",
        ["export", "--decoder", "{gguf}", "--task", "lm", "--output", "{out}"]
        + ["--max-sequence-length", "65"],
        "max_sequence_length=65 is beyond the 64 positions of",
    ),
    (
        "fewer_positions_for_a_keras_decoder_written_as_gguf",
        ["export", "--decoder", "{root}/decoder.keras", "--task", "lm", "--format", "gguf"]
        + ["--output", "{out}.gguf", "--max-sequence-length", "16"],
        "decoder.keras keeps its 64 positions in a --format gguf export",
    ),
    (
        "a_keras_file_that_is_not_a_zip_archive",
        ["generate", "--decoder", "{root}/not_zip.keras", "--prompt", "a"],
        "not_zip.keras is not a .keras file (not a zip archive, or cut short)",
    ),
    (
        "a_prompt_that_is_not_utf8",
        ["generate", "--decoder", "{gguf}", "--prompt", "a", "--prompt", "a\udcffb"],
        "--prompt b'a\\xffb' is not UTF-8 text.",
    ),
    (
        "a_negative_seed",
        ["generate", "--decoder", "{gguf}", "--prompt", "a", "--temperature", "1", "--seed", "-1"],
        "argument --seed: expected an integer >= 0, got '-1'",
    ),
    (
        "an_infinite_temperature",
        ["generate", "--decoder", "{gguf}", "--prompt", "a", "--temperature", "inf"],
        "argument --temperature: expected a finite number >= 0, got 'inf'",
    ),
    (
        "state_dir_inside_the_output",
        [*CONVERT, "--kv-heads", "1", "--data-file", "{text}", "--state-dir", "{out}/state"],
        "/state lies in --output",
    ),
    (
        "output_that_replaces_the_source",
        ["convert", "--decoder", "{hf}", "--to", "grouped", "--kv-heads", "1", "--output", "{hf}"]
        + ["--overwrite"],
        "would replace the model it reads (--decoder",
    ),
    (
        "output_below_a_file",
        ["convert", "--decoder", "{gguf}", "--to", "grouped", "--kv-heads", "1", "--output"]
        + ["{root}/afile/sub"],
        "afile is a file, not a directory.",
    ),
    (
        "output_that_is_a_file",
        ["convert", "--decoder", "{gguf}", "--to", "grouped", "--kv-heads", "1", "--output"]
        + ["{root}/afile", "--overwrite"],
        "afile is a file; expected a directory or a new path.",
    ),
    (
        "gguf_output_that_is_a_directory",
        ["export", "--decoder", "{gguf}", "--task", "lm", "--format", "gguf", "--output"]
        + ["{root}/dir.gguf", "--overwrite"],
        "dir.gguf is a directory; expected a file or a new path.",
    ),
    (
        "output_where_nothing_can_be_written",
        ["prune", "--decoder", "{gguf}", "--data-file", "{text}", "--output", "/proc/nope/out"],
        "Output /proc/nope/out cannot be created: nothing can be written in /proc",
    ),
    (
        "a_vocab_file_that_is_not_utf8",
        ["convert", "--model-file", "{root}/lm.keras", "--to", "grouped", "--kv-heads", "1"]
        + ["--data-file", "{text}", "--vocab-file", "{root}/binary_vocab.txt", "--output", "{out}"],
        "binary_vocab.txt' is not UTF-8 text; expected a WordPiece vocab.txt",
    ),
    (
        "a_vocab_file_without_unk",
        ["convert", "--model-file", "{root}/lm.keras", "--to", "grouped", "--kv-heads", "1"]
        + ["--data-file", "{text}", "--vocab-file", "{root}/empty.txt", "--output", "{out}"],
        "empty.txt' has no [UNK] token (0 lines)",
    ),
    (
        "an_empty_data_file",
        [*CONVERT, "--kv-heads", "1", "--data-file", "{root}/empty.txt"],
        "empty.txt, held_out part: The text has 0 tokens; one window of",
    ),
    (
        "a_data_file_that_is_a_directory",
        [*CONVERT, "--kv-heads", "1", "--data-file", "{root}"],
        "is a directory; expected a text file.",
    ),
    (
        "output_that_is_a_symbolic_link",
        [*CONVERT, "--kv-heads", "1", "--output", "{root}/link", "--overwrite"],
        "link is a symbolic link; expected a directory or a new path.",
    ),
    (
        "negative_finetune_epochs",
        ["prune", "--decoder", "{gguf}", "--finetune-epochs", "-1", "--output", "{out}"],
        "argument --finetune-epochs: expected a finite number >= 0, got '-1'",
    ),
    (
        "top_k_without_temperature",
        ["generate", "--decoder", "{gguf}", "--prompt", "a", "--top-k", "5"],
        "--top-k 5 samples: add --temperature > 0 (0 is greedy).",
    ),
    (
        "beam_size_for_a_decoder",
        ["export", "--decoder", "{gguf}", "--task", "lm", "--beam-size", "2", "--output", "{out}"],
        "--beam-size 2 shapes a translation export (--task translation).",
    ),
    (
        "tf_keras_framework_for_a_decoder",
        ["prune", "--decoder", "{gguf}", "--framework", "tf_keras", "--output", "{out}"],
        "--decoder is a Keras 3 model: drop --framework tf_keras (or say keras3).",
    ),
    (
        "tf_keras_framework_for_a_decoder_export",
        ["export", "--decoder", "{gguf}", "--task", "lm", "--framework", "tf_keras"]
        + ["--output", "{out}"],
        "--decoder is a Keras 3 model: drop --framework tf_keras (or say keras3).",
    ),
    (
        "eval_windows_beyond_the_text",
        [*CONVERT, "--kv-heads", "1", "--data-file", "{text}", "--eval-windows", "100000"],
        "--eval-windows 100000 asks for more (give more text, or fewer windows).",
    ),
    (
        "heal_windows_without_heal_steps",
        [*CONVERT, "--kv-heads", "1", "--data-file", "{text}", "--heal-windows", "4"],
        "--heal-windows 4 sizes the healing: add --heal-steps N.",
    ),
    (
        "finetune_epochs_for_a_decoder",
        ["prune", "--decoder", "{gguf}", "--data-file", "{text}", "--finetune-epochs", "2"]
        + ["--output", "{out}"],
        "--finetune-epochs 2 fine-tunes a pruned classifier; a pruned --decoder heals instead",
    ),
    (
        "healing_text_too_short",
        [*LATENT, "--cache-fraction", "0.5", "--rope-pairs", "2", "--heal-steps", "1"]
        + ["--heal-windows", "100000"],
        "--heal-windows 100000 asks for more",
    ),
]


def _fill(argv, files, out):
    return [a.format(out=out, **files) for a in argv]


@pytest.mark.parametrize("argv, fragment", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_decoder_input_is_one_line_and_writes_nothing(argv, fragment, files, tmp_path, capsys):
    out = tmp_path / "out"
    try:
        code = cli.main(_fill(argv, files, str(out)))
    except SystemExit as exit_:  # argparse errors
        code = exit_.code
    captured = capsys.readouterr()
    err = captured.err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, lines
    assert lines[0].startswith("headsize-tf") and fragment in lines[0], lines[0]
    assert not out.exists()
    # Refused before the calibration pass (minutes on a real model; measured or cached).
    assert "calibration statistics" not in captured.out


def test_generate_convert_and_prune_a_gguf_decoder(files, tmp_path, capsys):
    assert (
        cli.main(
            [
                "generate",
                "--decoder",
                files["gguf"],
                "--prompt",
                "the quick",
                "--max-new-tokens",
                "4",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "the quick" in printed and "parameters" in printed
    out = tmp_path / "grouped"
    argv = [
        "convert",
        "--decoder",
        files["hf"],
        "--to",
        "grouped",
        "--kv-heads",
        "1",
        "--data-file",
        files["text"],
        "--sequence-length",
        "32",
        "--eval-windows",
        "4",
        "--decode-tokens",
        "4",
        "--output",
        str(out),
    ]
    assert cli.main(argv) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["kv_cache_fraction"] == pytest.approx(0.5)
    assert report["target"]["method"] == "mean"  # The rotary default.
    healed, state = tmp_path / "healed", tmp_path / "state"
    argv = [*argv[:-1], str(healed), "--heal-steps", "20", "--heal-windows", "8"]
    argv += ["--state-dir", str(state)]
    assert cli.main(argv) == 0
    heal = json.loads((healed / "report.json").read_text())["heal"]
    for layer in heal["layers"]:  # Distillation brings each layer nearer the original's.
        assert layer["relative_error_after"] < layer["relative_error_before"]
    assert sorted(p.name for p in (state / "heal").iterdir()) == ["layer_0.npz", "layer_1.npz"]
    # A rerun resumes from the state: the converted, healed model is not made again.
    capsys.readouterr()
    assert cli.main([*argv, "--overwrite"]) == 0
    assert "resuming: the converted model" in capsys.readouterr().out
    again = json.loads((healed / "report.json").read_text())
    assert again["heal"] == heal
    assert report["perplexity"]["converted"] > 0
    exact = tmp_path / "latent"
    argv = [
        "convert",
        "--decoder",
        files["gguf"],
        "--to",
        "latent",
        "--kv-rank",
        "32",
        "--data-file",
        files["text"],
        "--sequence-length",
        "32",
        "--eval-windows",
        "4",
        "--decode-tokens",
        "4",
        "--output",
        str(exact),
    ]
    assert cli.main(argv) == 0
    report = json.loads((exact / "report.json").read_text())
    # Every rotary pair kept, the latent at the values' full rank (2 K/V heads x 16): exact.
    ppl = report["perplexity"]
    assert ppl["converted"] == pytest.approx(ppl["original"], rel=1e-4)
    pruned = tmp_path / "pruned"
    argv = [
        "prune",
        "--decoder",
        str(exact / "model.keras"),
        "--data-file",
        files["text"],
        "--target-fraction",
        "0.5",
        "--step",
        "0.5",
        "--importance-examples",
        "8",
        "--output",
        str(pruned),
    ]
    argv[2] = str(out / "model.keras")  # The grouped model: whole groups go.
    assert cli.main(argv) == 0
    report = json.loads((pruned / "report.json").read_text())
    assert report["kv_heads_per_layer"] is not None
    assert (pruned / "model.keras").is_file()

    # The pruned model for llama.cpp: its per-layer heads, its logits.
    gguf_file = tmp_path / "pruned.gguf"
    export = ["export", "--decoder", str(pruned / "model.keras"), "--task", "lm"]
    assert cli.main([*export, "--format", "gguf", "--output", str(gguf_file)]) == 0
    assert f"exported: {gguf_file} (GGUF (f32);" in capsys.readouterr().out
    from headsize_tf.data.gguf_llama import read_gguf_llama
    from headsize_tf.keras3.pretrained.decoders import load_decoder

    config = read_gguf_llama(gguf_file).config
    assert [config.heads(i) for i in range(config.num_layers)] == list(
        zip(report["heads_per_layer"], report["kv_heads_per_layer"], strict=True)
    )
    ids = np.arange(3, 19, dtype=np.int32)[None]
    np.testing.assert_allclose(
        np.asarray(load_decoder(gguf_file)(ids)),
        np.asarray(load_decoder(pruned / "model.keras")(ids)),
        atol=1e-5,
    )


def test_prune_whole_key_value_groups_shrinks_the_cache_by_the_target(files, tmp_path, capsys):
    out = tmp_path / "groups"
    argv = ["prune", "--decoder", files["gguf"], "--data-file", files["text"], "--unit"]
    argv += ["kv_group", "--target-fraction", "0.5", "--step", "0.25"]
    argv += ["--importance-examples", "8", "--output", str(out)]
    assert cli.main(argv) == 0
    report = json.loads((out / "report.json").read_text())
    # 2 layers x 2 groups of 2 query heads: half the groups go, one a layer at least.
    assert report["unit"] == "kv_group"
    assert report["kv_heads_per_layer"] == [1, 1] and report["heads_per_layer"] == [2, 2]
    assert [p["heads_pruned"] for p in report["curve"]] == [0, 2, 4]
    assert "key/value heads: 4 -> 2 (KV cache 50.0% of the original's)" in capsys.readouterr().out
    assert report["perplexity"]["pruned"] == pytest.approx(report["perplexity"]["masked"], 1e-4)

    healed = tmp_path / "healed"
    argv = [*argv[:-1], str(healed), "--heal-steps", "20", "--heal-windows", "8"]
    assert cli.main(argv) == 0
    heal = json.loads((healed / "report.json").read_text())["heal"]
    for layer in heal["layers"]:  # Each pruned layer nearer the original's outputs.
        assert layer["relative_error_after"] <= layer["relative_error_before"]
    assert heal["perplexity_before"] == pytest.approx(report["perplexity"]["pruned"], 1e-4)
    printed = capsys.readouterr().out
    assert "healed (20 steps a layer" in printed and "healing: 20 steps" in printed
    assert "perplexity after removal and healing" in printed


@pytest.mark.slow  # end to end, in the full run (docs/testing.md)
def test_a_gguf_decoder_converts_to_cache_budgets_through_the_cli(files, tmp_path):
    # Latent at half the cache, allocated by sensitivity; rotated RoPE; grouped per layer.
    budget = tmp_path / "budget"
    argv = _fill(LATENT, files, str(budget)) + ["--cache-fraction", "0.5", "--rope-pairs", "2"]
    argv += ["--allocation", "sensitivity", "--calibration-windows", "4", "--eval-windows", "2"]
    assert cli.main([*argv, "--decode-tokens", "4"]) == 0
    report = json.loads((budget / "report.json").read_text())
    assert report["kv_cache_fraction"] == pytest.approx(0.5)
    assert report["calibration"]["tokens"] == 4 * 16  # Inputs: a window's last id is a target.
    assert sum(report["latent_per_layer"]) == 2 * (32 - 2 * 2 * 2)  # The uniform total.
    sensitivity = report["sensitivity"]
    assert sensitivity["tokens"] == 4 * 16 and sensitivity["loss"] <= sensitivity["loss_uniform"]
    assert sensitivity["latent_per_layer"] == report["latent_per_layer"]
    # Rotated RoPE at the same budget: one rotary key of 2 K/V heads x 2 pairs, weights only,
    # the PCA over bands of 2 frequencies (FreqFold): 4 bands of 2 x 2 components.
    rotated = tmp_path / "rotated"
    argv = _fill(LATENT, files, str(rotated)) + ["--cache-fraction", "0.5", "--rope-pairs", "2"]
    argv += ["--rope-strategy", "rotated", "--calibration", "weights", "--eval-windows", "2"]
    assert cli.main([*argv, "--method", "split_svd", "--rope-fold", "2"]) == 0
    report = json.loads((rotated / "report.json").read_text())
    assert report["kv_cache_fraction"] == pytest.approx(0.5)
    assert [len(c) for c in report["rope_components_per_layer"]] == [4, 4]
    assert all(b < 4 and j < 4 for c in report["rope_components_per_layer"] for b, j in c)
    assert report["plan"]["rope_fold"] == 2 and "fold 2" in report["target"]["method"]
    assert {layer["method"] for layer in report["layers"]} == {"rotated_rope_split_svd"}
    assert report["perplexity"]["converted"] < 2 * report["perplexity"]["original"]
    # Grouped K/V at 3/4 of the cache: 2 heads kept in one layer of two, 1 in the other.
    mixed = tmp_path / "mixed"
    argv = [*CONVERT, "--cache-fraction", "0.75", "--calibration", "weights"]
    argv += ["--data-file", "{text}", "--sequence-length", "16", "--eval-windows", "2"]
    assert cli.main(_fill(argv, files, str(mixed))) == 0
    report = json.loads((mixed / "report.json").read_text())
    assert sorted(report["kv_heads_per_layer"]) == [1, 2]
    assert report["kv_cache_fraction"] == pytest.approx(0.75)


def test_training_text_checks_name_a_corpus_held_out_whole():
    import argparse
    import types

    import numpy as np

    from headsize_tf.cli._convert_keras3 import _check_train_text

    args = argparse.Namespace(corpus="moby_dick")
    held_out_only = types.SimpleNamespace(train=np.zeros([0, 17], np.int32))
    with pytest.raises(ValueError, match="--corpus moby_dick is held out whole .* use --corpus"):
        _check_train_text(args, held_out_only, "--calibration-windows 32", 32)
    short = types.SimpleNamespace(train=np.zeros([3, 17], np.int32))
    with pytest.raises(ValueError, match="3 windows of 16 tokens; --heal-windows 4 asks for"):
        _check_train_text(args, short, "--heal-windows 4", 4)
    with pytest.raises(ValueError, match="--uptrain-steps works on training text: pass"):
        _check_train_text(args, None, "--uptrain-steps 2", 1)


@pytest.mark.slow  # end to end, in the full run (docs/testing.md)
def test_convert_a_gemma2_directory_exactly_at_full_rank(files, tokenizer_json, tmp_path):
    """A Hugging Face Gemma 2 directory (caps, sandwich norms, a local and a global layer)
    through `convert --decoder`: its latent at full rank has the original's perplexity."""
    import dataclasses

    import numpy as np

    from headsize_tf.core.llama_checkpoint import LlamaCheckpoint, weight_shapes

    config = dataclasses.replace(
        random_checkpoint(tokenizer_json).config,
        model_type="gemma2",
        hidden_activation="gelu_pytorch_tanh",
        tie_word_embeddings=True,
        head_dim=16,
        sliding_window=8,
        sliding_window_layers=(True, False),
        attention_logit_soft_cap=2.0,
        final_logit_soft_cap=5.0,
    )
    rng = np.random.default_rng(5)
    weights = {
        name: ((0.1 if len(shape) == 1 else 0.15) * rng.standard_normal(shape)).astype("float32")
        for name, shape in weight_shapes(config).items()  # Norms are offsets: 1 + w.
    }
    hf = write_hf_llama_dir(LlamaCheckpoint(config, weights, tokenizer_json), tmp_path / "gemma2")
    out = tmp_path / "latent"
    argv = ["convert", "--decoder", str(hf), "--to", "latent", "--kv-rank", "32"]
    argv += ["--data-file", files["text"], "--sequence-length", "32", "--eval-windows", "4"]
    assert cli.main([*argv, "--decode-tokens", "4", "--output", str(out)]) == 0
    ppl = json.loads((out / "report.json").read_text())["perplexity"]
    assert ppl["converted"] == pytest.approx(ppl["original"], rel=1e-4)


def test_a_qwen3_directory_converts_to_a_latent_and_refuses_rotated_rope(
    files, tokenizer_json, tmp_path, capsys
):
    """Qwen3's per-head query/key norms through `convert --to latent`: with every rotary pair
    kept at full rank, the original's perplexity, its cache counting each head's key scale;
    rotated RoPE, which would mix the normalised key heads, exits 2 with one line."""
    import dataclasses

    import numpy as np

    from headsize_tf.core.llama_checkpoint import LlamaCheckpoint, weight_shapes

    config = dataclasses.replace(
        random_checkpoint(tokenizer_json).config, model_type="qwen3", qk_norm=True, head_dim=16
    )
    rng = np.random.default_rng(6)
    weights = {
        name: (
            1.0 + 0.1 * rng.standard_normal(shape)
            if len(shape) == 1
            else 0.15 * rng.standard_normal(shape)
        ).astype("float32")
        for name, shape in weight_shapes(config).items()
    }
    hf = write_hf_llama_dir(LlamaCheckpoint(config, weights, tokenizer_json), tmp_path / "qwen3")
    data = ["--data-file", files["text"], "--sequence-length", "32", "--eval-windows", "4"]
    out = tmp_path / "latent"
    argv = ["convert", "--decoder", str(hf), "--to", "latent", "--kv-rank", "64", *data]
    assert cli.main([*argv, "--output", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    ppl = report["perplexity"]
    assert ppl["converted"] == pytest.approx(ppl["original"], rel=1e-4)
    # Per layer: a latent of 64, 2 rotary keys of 16 and the 4 query heads' key scales, as
    # float32 (the original: 2 x (16 + 16) values).
    kv = report["kv_cache_bytes_per_token"]
    assert (kv["original"], kv["converted"]) == (2 * 64 * 4, 2 * (64 + 32 + 4) * 4)
    capsys.readouterr()
    argv = ["convert", "--decoder", str(hf), "--to", "latent", "--cache-fraction", "0.5"]
    argv += ["--rope-strategy", "rotated", *data]
    assert cli.main([*argv, "--output", str(tmp_path / "rotated")]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "rotated RoPE would mix" in error
    assert not (tmp_path / "rotated").exists()


def test_a_rotated_high_latent_exports_to_llama_cpps_deepseek2(files, tmp_path, capsys):
    """`convert --rope-strategy rotated_high`, then `export --format gguf`: llama.cpp's
    "deepseek2" file computes the converted model's logits (the latents it cannot compute:
    tests/data/gguf_mla_writer_test.py)."""
    from headsize_tf.keras3.pretrained.decoders import load_decoder
    from tests.data.gguf_mla_writer_test import IDS, deepseek2_logits

    out = tmp_path / "mla"
    argv = ["convert", "--decoder", files["gguf"], "--to", "latent", "--cache-fraction", "0.5"]
    argv += ["--rope-strategy", "rotated_high", "--rope-pairs", "1", "--calibration", "weights"]
    argv += ["--data-file", files["text"], "--sequence-length", "32", "--eval-windows", "2"]
    assert cli.main([*argv, "--decode-tokens", "2", "--output", str(out)]) == 0
    export = ["export", "--decoder", str(out / "model.keras"), "--task", "lm", "--format", "gguf"]
    assert cli.main([*export, "--output", str(tmp_path / "mla.gguf")]) == 0
    assert "GGUF (f32)" in capsys.readouterr().out
    model = load_decoder(out / "model.keras")
    want = np.asarray(model(np.asarray([IDS], np.int32)))[0]
    np.testing.assert_allclose(deepseek2_logits(tmp_path / "mla.gguf", IDS), want, atol=2e-4)
