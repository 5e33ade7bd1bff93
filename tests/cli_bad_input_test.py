"""Every bad input through the CLI: exit status 2, one line naming it, nothing written.

The commands run in process (`headsize_tf.cli.main`), so the table stays fast;
`test_quiet_commands` checks the real console script in a subprocess.
"""

import os
import pathlib
import subprocess
import sys

import pytest

from headsize_tf import cli

NOPE = "/nonexistent/headsize_tf_model"


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("bad_input")
    paths = {
        "bad_yaml": ": : :\n",
        "old_keys_yaml": "task:\n  model:\n    attention_type: fixed_head\n",
        "unknown_key_yaml": "task:\n  model:\n    no_such_field: 3\n",
        "sentences": "a sentence\n",
        "empty": "",
        "space": "{not json",
        "labelled.csv": "text,label\na fine film,pos\na dull film,neg\n",
        "one_class.csv": "".join(["text,label\n"] + [f"film {i},pos\n" for i in range(20)]),
        "latin1.csv": "text,label\ncafé,pos\n".encode("latin-1"),
        "no_label.csv": "text,label\na fine film,pos\na dull film,\n",
        "bad_split.csv": "text,label,split\na fine film,pos,train\na dull film,neg,holdout\n",
        "ragged.csv": "text,label\na fine, long film,pos\n",
        "header_only.csv": "text,label\n",
    }
    out = {}
    for name, text in paths.items():
        path = root / name
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text)
        out[name.replace(".", "_")] = str(path)
    existing = root / "existing_dir"
    existing.mkdir()
    (existing / "keep.txt").write_text("keep")
    (existing / "1").mkdir()  # An export version that exists.
    out["existing"] = str(existing)
    not_a_model = root / "not_a_model_dir"
    not_a_model.mkdir()
    out["not_a_model"] = str(not_a_model)
    (root / "link_to_dir").symlink_to(not_a_model)
    lm_dir = root / "lm_model_dir"  # As `train` marks a causal LM's model_dir.
    lm_dir.mkdir()
    (lm_dir / "headsize_experiment.json").write_text(
        '{"experiment": "headsize_lm/language_modeling"}'
    )
    out["lm_dir"] = str(lm_dir)
    span_dir = root / "span_model_dir"
    span_dir.mkdir()
    (span_dir / "headsize_experiment.json").write_text(
        '{"experiment": "headsize_bert/span_labeling"}'
    )
    out["span_dir"] = str(span_dir)
    out["root"] = str(root)
    return out


LM = "headsize_lm/language_modeling"
EXPORT_KERAS3 = ["export", "--framework", "keras3", "--output", "{out}"]
# (name, argv with {placeholders}, a fragment the one-line message must hold)
CASES = [
    (
        "compress_model_dir_of_span_labeling",
        ["compress", "--model_dir", "{span_dir}", "--shared-key-dim", "8", "--output", "{out}"],
        "headsize_bert/span_labeling model_dir; compress --model-dir takes",
    ),
    (
        "embed_model_dir_not_a_model_dir",
        ["embed", "--model-dir", "{not_a_model}", "--input", "{sentences}", "--output", "{out}"],
        "not a `headsize-tf train` model_dir",
    ),
    (
        "embed_model_dir_of_a_language_model",
        ["embed", "--model_dir", "{lm_dir}", "--input", "{sentences}", "--output", "{out}"],
        "headsize_lm/language_modeling model_dir; sentence embeddings come from an encoder",
    ),
    (
        "embed_model_dir_keras3",
        [
            "embed",
            "--model_dir",
            "{lm_dir}",
            "--framework",
            "keras3",
            "--input",
            "{sentences}",
            "--output",
            "{out}",
        ],
        "drop --framework keras3",
    ),
    (
        "embed_vocab_file_without_model_dir",
        [
            "embed",
            "--model",
            "minilm-l6",
            "--vocab-file",
            "{sentences}",
            "--input",
            "{sentences}",
            "--output",
            "{out}",
        ],
        "--vocab-file is for a --model-dir; a pretrained encoder brings its own",
    ),
    (
        "export_embedding_of_a_language_model_dir",
        ["export", "--model_dir", "{lm_dir}", "--task", "embedding", "--output", "{out}"],
        "sentence embeddings come from an encoder experiment",
    ),
    ("params_head_size_word", ["params", "--head-size", "abc"], "'abc'"),
    ("params_zero_width", ["params", "--width", "0"], "got '0'"),
    ("params_bad_kind", ["params", "--attention-type", "talking"], "'talking'"),
    (
        "params_width_not_multiple",
        [
            "params",
            "--attention-type",
            "standard",
            "--width",
            "10",
            "--num-heads",
            "4",
            "--match-widths",
        ],
        "width (10) is not a multiple of num_heads (4)",
    ),
    ("params_negative_layers", ["params", "--num-layers", "-1"], "got '-1'"),
    (
        "params_head_size_of_standard_heads",
        ["params", "--attention-type", "standard", "--head-size", "7"],
        "--head-size 7: standard heads are width / heads (256 / 8)",
    ),
    ("no_such_command", ["fly"], "'fly'"),
    (
        "train_unknown_experiment",
        ["train", "--experiment", "nope", "--model-dir", "{out}"],
        "Unknown experiment 'nope'",
    ),
    (
        "train_yaml_syntax",
        ["train", "--experiment", LM, "--config-file", "{bad_yaml}", "--model-dir", "{out}"],
        "bad_yaml",
    ),
    (
        "train_old_yaml_key",
        ["train", "--experiment", LM, "--config_file", "{old_keys_yaml}", "--model_dir", "{out}"],
        "attention.kind",
    ),
    (
        "train_unknown_yaml_key",
        [
            "train",
            "--experiment",
            LM,
            "--config_file",
            "{unknown_key_yaml}",
            "--model_dir",
            "{out}",
        ],
        "no_such_field",
    ),
    (
        "train_missing_config",
        ["train", "--experiment", LM, "--config_file", NOPE + ".yaml", "--model_dir", "{out}"],
        NOPE,
    ),
    (
        "train_bad_override",
        [
            "train",
            "--experiment",
            LM,
            "--params_override",
            "task.model.attention.num_heads=0",
            "--model_dir",
            "{out}",
        ],
        "num_heads",
    ),
    (
        "train_override_not_an_integer",
        ["train", "--experiment", LM, "--params-override", "task.model.num_layers=abc"]
        + ["--model-dir", "{out}"],
        "task.model.num_layers must be an integer; got 'abc'",
    ),
    (
        "train_override_zero_layers",
        ["train", "--experiment", LM, "--params-override", "task.model.num_layers=0"]
        + ["--model-dir", "{out}"],
        "num_layers must be a positive int; got 0",
    ),
    (
        "train_override_negative_steps",
        ["train", "--experiment", LM, "--params-override", "trainer.train_steps=-5"]
        + ["--model-dir", "{out}"],
        "trainer.train_steps must be a positive int; got -5",
    ),
    (
        "train_override_unknown_field",
        ["train", "--experiment", LM, "--params-override", "task.model.no_such=1"]
        + ["--model-dir", "{out}"],
        "CausalLMConfig has no field 'no_such'",
    ),
    (
        "train_without_data",
        ["train", "--experiment", LM, "--model-dir", "{out}"],
        "task.train_data has no input_path or tfds_name",
    ),
    (
        "train_eval_without_checkpoint",
        ["train", "--experiment", LM, "--mode", "eval", "--model-dir", "{not_a_model}"]
        + ["--params-override", "task.validation_data.tfds_name=lm1b"],
        "mode='eval' needs a trained --model-dir or a task.init_checkpoint",
    ),
    (
        "train_tpu_without_tpu_strategy",
        ["train", "--experiment", LM, "--params-override", "trainer.train_steps=1"]
        + ["--tpu", "grpc://10.0.0.1:8470", "--model-dir", "{out}"],
        "--tpu 'grpc://10.0.0.1:8470' is for strategy 'tpu'",
    ),
    (
        "train_too_many_cpu_devices",
        ["train", "--experiment", LM, "--cpu-devices", "100000", "--model-dir", "{out}"],
        "must be between 1 and 256; got 100000",
    ),
    (
        "train_print_config_and_model_dir",
        ["train", "--experiment", LM, "--print-config", "--model-dir", "{out}"],
        "not allowed with argument",
    ),
    (
        "train_bad_mode",
        ["train", "--experiment", LM, "--mode", "fly", "--model_dir", "{out}"],
        "'fly'",
    ),
    (
        "train_bad_seed",
        ["train", "--experiment", LM, "--seed", "x", "--model_dir", "{out}"],
        "'x'",
    ),
    (
        "embed_unknown_model",
        ["embed", "--model", "bert-huge", "--input", "{sentences}", "--output", "{out}.npy"],
        "bert-huge",
    ),
    (
        "embed_missing_checkpoint",
        ["embed", "--checkpoint", NOPE, "--input", "{sentences}", "--output", "{out}.npy"],
        NOPE,
    ),
    (
        "embed_missing_input",
        ["embed", "--model", "minilm-l6", "--input", NOPE + ".txt", "--output", "{out}.npy"],
        NOPE,
    ),
    (
        "embed_empty_input",
        ["embed", "--model", "minilm-l6", "--input", "{empty}", "--output", "{out}.npy"],
        "empty",
    ),
    (
        "embed_zero_batch",
        [
            "embed",
            "--model",
            "minilm-l6",
            "--input",
            "{sentences}",
            "--output",
            "{out}.npy",
            "--batch-size",
            "0",
        ],
        "got '0'",
    ),
    (
        "compress_zero_dim",
        ["compress", "--model", "minilm-l6", "--shared-key-dim", "0", "--output", "{out}"],
        "got '0'",
    ),
    (
        "compress_above_full_rank",
        ["compress", "--model", "minilm-l6", "--shared-key-dim", "99999", "--output", "{out}"],
        "shared_key_dim=99999 is outside [1, 384]",
    ),
    (
        "compress_existing_output",
        ["compress", "--model", "minilm-l6", "--shared-key-dim", "64", "--output", "{existing}"],
        "existing_dir",
    ),
    (
        "compress_not_a_model_dir",
        ["compress", "--checkpoint", "{not_a_model}", "--shared-key-dim", "8", "--output", "{out}"],
        "not_a_model_dir",
    ),
    (
        "spectrum_missing_checkpoint",
        ["analyze", "spectrum", "--checkpoint", NOPE, "--output", "{out}.png"],
        NOPE,
    ),
    ("spectrum_no_analysis", ["analyze"], "ANALYSIS"),
    (
        "prune_fraction_above_one",
        ["prune", "--model", "minilm-l6", "--target-fraction", "1.5", "--output", "{out}"],
        "'1.5'",
    ),
    (
        "prune_bad_step",
        ["prune", "--model", "minilm-l6", "--step", "-0.1", "--output", "{out}"],
        "'-0.1'",
    ),
    (
        "prune_unknown_data",
        ["prune", "--model", "minilm-l6", "--data", "imdb", "--output", "{out}"],
        "'imdb'",
    ),
    (
        "prune_existing_output",
        ["prune", "--model", "minilm-l6", "--output", "{existing}"],
        "existing_dir",
    ),
    (
        "prune_data_file_missing",
        ["prune", "--model", "minilm-l6", "--data-file", NOPE + ".csv", "--output", "{out}"],
        NOPE + ".csv' does not exist",
    ),
    (
        "prune_data_file_unknown_extension",
        ["prune", "--model", "minilm-l6", "--data-file", "{sentences}", "--output", "{out}"],
        "has an unknown extension",
    ),
    (
        "prune_data_file_empty",
        [
            "prune",
            "--model",
            "minilm-l6",
            "--data-file",
            "{empty}",
            "--data-format",
            "csv",
            "--output",
            "{out}",
        ],
        "empty' is empty",
    ),
    (
        "prune_data_file_missing_column",
        [
            "prune",
            "--model",
            "minilm-l6",
            "--data-file",
            "{labelled_csv}",
            "--text-column",
            "sentence",
            "--output",
            "{out}",
        ],
        "labelled.csv' has no column 'sentence' (--text-column); its columns are ['text', 'label']",
    ),
    (
        "prune_data_file_one_class",
        ["prune", "--model", "minilm-l6", "--data-file", "{one_class_csv}", "--output", "{out}"],
        "one_class.csv' has one class only ('pos' in 'label')",
    ),
    (
        "prune_data_file_not_utf8",
        ["prune", "--model", "minilm-l6", "--data-file", "{latin1_csv}", "--output", "{out}"],
        "latin1.csv' is not UTF-8",
    ),
    (
        "prune_data_file_missing_label",
        ["prune", "--model", "minilm-l6", "--data-file", "{no_label_csv}", "--output", "{out}"],
        "no_label.csv' line 3 has no label in 'label'",
    ),
    (
        "prune_data_file_bad_split",
        [
            "prune",
            "--model",
            "minilm-l6",
            "--data-file",
            "{bad_split_csv}",
            "--split-column",
            "split",
            "--output",
            "{out}",
        ],
        "split 'holdout' in 'split' is not train, dev, validation or test",
    ),
    (
        "prune_data_file_ragged_row",
        ["prune", "--model", "minilm-l6", "--data-file", "{ragged_csv}", "--output", "{out}"],
        "ragged.csv' line 2 has 3 fields; its header has 2",
    ),
    (
        "prune_data_file_header_only",
        ["prune", "--model", "minilm-l6", "--data-file", "{header_only_csv}", "--output", "{out}"],
        "header_only.csv' has a header but no rows",
    ),
    (
        "prune_data_file_bad_json",
        [
            "prune",
            "--model",
            "minilm-l6",
            "--data-file",
            "{space}",
            "--data-format",
            "jsonl",
            "--output",
            "{out}",
        ],
        "space' line 1 is not valid JSON",
    ),
    (
        "prune_data_file_no_dev_rows",
        ["prune", "--model", "minilm-l6", "--data-file", "{labelled_csv}", "--output", "{out}"],
        "labelled.csv' has no dev rows",
    ),
    (
        "prune_unknown_tfds_task",
        ["prune", "--model", "minilm-l6", "--tfds", "glue/stsb", "--output", "{out}"],
        "'glue/stsb'",
    ),
    (
        "prune_data_file_and_tfds",
        [
            "prune",
            "--model",
            "minilm-l6",
            "--data-file",
            "{labelled_csv}",
            "--tfds",
            "glue/sst2",
            "--output",
            "{out}",
        ],
        "not allowed with argument --data-file",
    ),
    (
        "prune_task_and_data_file",
        [
            "prune",
            "--model",
            "minilm-l6",
            "--task",
            "sentiment",
            "--data-file",
            "{labelled_csv}",
            "--output",
            "{out}",
        ],
        "Pass one data source; got --task and --data-file",
    ),
    (
        "prune_text_column_without_data_file",
        ["prune", "--model", "minilm-l6", "--text-column", "text", "--output", "{out}"],
        "--text-column only apply to --data-file",
    ),
    (
        "prune_bad_data_format",
        [
            "prune",
            "--model",
            "minilm-l6",
            "--data-file",
            "{labelled_csv}",
            "--data-format",
            "xml",
            "--output",
            "{out}",
        ],
        "'xml'",
    ),
    (
        "tune_zero_trials",
        ["tune", "--experiment", LM, "--max-trials", "0", "--output", "{out}"],
        "got '0'",
    ),
    (
        "tune_bad_tuner",
        ["tune", "--experiment", LM, "--tuner", "grid", "--output", "{out}"],
        "'grid'",
    ),
    (
        "tune_missing_search_space",
        ["tune", "--experiment", LM, "--search-space", NOPE + ".yaml", "--output", "{out}"],
        NOPE,
    ),
    (
        "export_missing_model_dir",
        ["export", "--model-dir", NOPE, "--task", "lm", "--output", "{out}"],
        NOPE,
    ),
    (
        "export_existing_output",
        ["export", "--model", "minilm-l6", "--task", "embedding", "--output", "{existing}"],
        "existing_dir",
    ),
    (
        "export_bad_task",
        ["export", "--model", "minilm-l6", "--task", "vision", "--output", "{out}"],
        "'vision'",
    ),
    (
        "export_keras3_translation",
        [*EXPORT_KERAS3, "--checkpoint", "{not_a_model}", "--task", "translation"],
        "exports the tasks embedding, sentence_prediction, lm; got 'translation'",
    ),
    (
        "export_keras3_model_dir",
        [*EXPORT_KERAS3, "--model_dir", "{lm_dir}", "--task", "lm"],
        "--model-dir holds a tf_keras (Model Garden) model: drop --framework keras3",
    ),
    (
        "export_keras3_lm_of_a_directory",
        [*EXPORT_KERAS3, "--checkpoint", "{not_a_model}", "--task", "lm"],
        "needs --model-file FILE.keras, a saved Keras 3 CausalLM; got '",
    ),
    (
        "export_keras3_vocab_file_of_an_encoder",
        [*EXPORT_KERAS3, "--checkpoint", "{not_a_model}", "--task", "embedding"]
        + ["--vocab-file", "{sentences}"],
        "--vocab-file is for --task lm; an encoder checkpoint brings its own vocabulary",
    ),
    (
        "export_keras3_classifier_without_head",
        [*EXPORT_KERAS3, "--checkpoint", "{not_a_model}", "--task", "sentence_prediction"],
        "needs --checkpoint DIR with a classifier head (classifier_head.npz",
    ),
    ("data_prepare_bad_vocab", ["data", "prepare", "--vocab-size", "-5"], "'-5'"),
    (
        "data_squad_sequence_too_short_for_the_question",
        ["data", "squad", "--vocab-file", "{sentences}", "--train-json", "{sentences}"]
        + ["--dev-json", "{sentences}", "--sequence-length", "4", "--data-dir", "{out}"],
        "A sequence length of 4 cannot hold a question token, a document token",
    ),
    (
        "data_vocab_over_its_own_text",
        ["data", "vocab", "--text", "{sentences}", "--output", "{sentences}"],
        "is the --text file",
    ),
    (
        "data_vocab_over_an_existing_file",
        ["data", "vocab", "--text", "{sentences}", "--output", "{labelled_csv}"],
        "exists; pass --overwrite to replace it.",
    ),
    (
        "data_vocab_missing_text",
        ["data", "vocab", "--text", NOPE + ".txt", "--output", "{out}.txt"],
        NOPE,
    ),
    (
        "data_squad_missing_json",
        [
            "data",
            "squad",
            "--vocab-file",
            NOPE + ".txt",
            "--train-json",
            NOPE + ".json",
            "--dev-json",
            NOPE + ".json",
        ],
        NOPE,
    ),
    (
        "convert_rank_zero",
        [
            "convert",
            "--model_dir",
            "{lm_dir}",
            "--to",
            "latent",
            "--kv-rank",
            "0",
            "--output",
            "{out}",
        ],
        "--kv-rank: expected a positive integer, got '0'",
    ),
    (
        "convert_encoder_only_model_dir_to_grouped",
        [
            "convert",
            "--model_dir",
            "{span_dir}",
            "--to",
            "grouped",
            "--kv-heads",
            "2",
            "--output",
            "{out}",
        ],
        "span_model_dir is an encoder-only headsize_bert/span_labeling run: grouped heads",
    ),
    (
        "convert_model_dir_of_the_wrong_kind",
        [
            "convert",
            "--model_dir",
            "{span_dir}",
            "--to",
            "collaborative",
            "--shared-key-dim",
            "8",
            "--output",
            "{out}",
        ],
        "is a headsize_bert/span_labeling run; convert takes headsize_lm/language_modeling",
    ),
    (
        "convert_not_a_model_dir",
        [
            "convert",
            "--model_dir",
            "{not_a_model}",
            "--to",
            "latent",
            "--kv-rank",
            "4",
            "--output",
            "{out}",
        ],
        "is not a `headsize-tf train` model_dir",
    ),
    (
        "convert_missing_output",
        ["convert", "--model_dir", "{lm_dir}", "--to", "grouped", "--kv-heads", "2"],
        "the following arguments are required: --output",
    ),
    (
        "convert_size_flag_of_another_target",
        [
            "convert",
            "--model_dir",
            "{lm_dir}",
            "--to",
            "grouped",
            "--kv-rank",
            "4",
            "--output",
            "{out}",
        ],
        "--kv-rank is for --to latent; --to grouped takes --kv-heads",
    ),
    (
        "convert_unknown_method",
        [
            "convert",
            "--model_dir",
            "{lm_dir}",
            "--to",
            "grouped",
            "--kv-heads",
            "2",
            "--method",
            "als",
            "--output",
            "{out}",
        ],
        "Unknown grouped method 'als'; expected one of ['mean', 'svd', 'svd_values']",
    ),
    (
        "convert_keras3_uptraining_without_text",
        [
            "convert",
            "--framework",
            "keras3",
            "--model",
            "{sentences}",
            "--to",
            "grouped",
            "--kv-heads",
            "1",
            "--uptrain-steps",
            "5",
            "--output",
            "{out}",
        ],
        "--uptrain-steps needs text to train on",
    ),
    (
        "convert_keras3_not_a_keras_file",
        [
            "convert",
            "--model-file",
            "{sentences}",
            "--to",
            "grouped",
            "--kv-heads",
            "1",
            "--output",
            "{out}",
        ],
        "is not a .keras file",
    ),
    (
        "convert_model_dir_with_keras3",
        [
            "convert",
            "--framework",
            "keras3",
            "--model_dir",
            "{lm_dir}",
            "--to",
            "grouped",
            "--kv-heads",
            "1",
            "--output",
            "{out}",
        ],
        "drop --framework keras3",
    ),
    (
        "convert_old_model_spelling_of_no_keras_file",
        ["convert", "--model", "minilm-l6", "--to", "grouped", "--kv-heads", "1"]
        + ["--output", "{out}"],
        "argument --model: expected a .keras file (now spelled --model-file FILE.keras",
    ),
    (
        "convert_model_file_on_tf_keras",
        ["convert", "--framework", "tf_keras", "--model-file", "{root}/lm.keras"]
        + ["--to", "grouped", "--kv-heads", "1", "--output", "{out}"],
        "lm.keras is a Keras 3 model: drop --framework tf_keras",
    ),
    (
        "convert_vocab_file_of_a_model_dir",
        ["convert", "--model-dir", "{lm_dir}", "--to", "grouped", "--kv-heads", "2"]
        + ["--vocab", "{sentences}", "--output", "{out}"],
        "--vocab-file: text for a .keras LM (--model-file); a --model-dir is evaluated",
    ),
    (
        "train_missing_model_dir",
        ["train", "--experiment", LM],
        "one of the arguments --model-dir --print-config is required",
    ),
    (
        "embed_sequence_length_one",
        ["embed", "--model", "minilm-l6", "--input", "{sentences}", "--output", "{out}"]
        + ["--sequence-length", "1"],
        "--sequence-length must be >= 2; got 1",
    ),
    (
        "embed_old_sequence_length_spelling_zero",
        ["embed", "--model", "minilm-l6", "--input", "{sentences}", "--output", "{out}"]
        + ["--max-seq-length", "0"],
        "argument --max-seq-length: expected a positive integer, got '0'",
    ),
    (
        "export_model_file_of_an_encoder_task",
        ["export", "--model-file", "{root}/lm.keras", "--task", "embedding", "--output", "{out}"],
        "is a Keras 3 CausalLM: it exports --task lm, not embedding",
    ),
    (
        "export_model_file_not_a_keras_file",
        ["export", "--model-file", "{sentences}", "--task", "lm", "--output", "{out}"],
        "expected a saved Keras 3 CausalLM, a .keras file",
    ),
    (
        "export_sequence_limit_without_decoder",
        ["export", "--model", "minilm-l6", "--task", "embedding", "--output", "{out}"]
        + ["--max-sequence-length", "64"],
        "--max-sequence-length is for --decoder exports",
    ),
    ("demo_bad_steps", ["demo", "--steps", "0", "--output", "{out}"], "got '0'"),
    (
        "demo_output_a_link",
        ["demo", "--quick", "--output", "{root}/link_to_dir"],
        "link_to_dir is a symbolic link; expected a directory or a new path",
    ),
    (
        "demo_output_a_file",
        ["demo", "--quick", "--output", "{sentences}"],
        "is a file; expected a directory or a new path",
    ),
    ("demo_negative_seed", ["demo", "--seed", "-1", "--output", "{out}"], "got '-1'"),
    (
        "demo_quick_with_both_step_counts",
        ["demo", "--quick", "--steps", "2", "--finetune-steps", "2", "--output", "{out}"],
        "--quick sets --steps and --finetune-steps, and both are given",
    ),
    (
        "generate_seed_without_temperature",
        ["generate", "--decoder", NOPE, "--prompt", "a", "--seed", "3"],
        "--seed 3 seeds sampling: add --temperature",
    ),
    ("demo_bad_finetune_steps", ["demo", "--finetune-steps", "x", "--output", "{out}"], "'x'"),
    (
        "demo_prune_fraction_zero",
        ["demo", "--prune-fraction", "0", "--output", "{out}"],
        "expected a fraction in (0, 1), got '0'",
    ),
    (
        "convert_learning_rate_above_one",
        ["convert", "--model_dir", "{out}", "--to", "grouped", "--kv-heads", "2"]
        + ["--output", "{out}", "--learning-rate", "2"],
        "argument --learning-rate: expected a fraction in (0, 1), got '2'",
    ),
]


@pytest.mark.parametrize("argv, fragment", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_writes_nothing(argv, fragment, files, tmp_path, capsys):
    out = str(tmp_path / "out")
    argv = [a.format(out=out, **files) for a in argv]
    before = sorted(os.listdir(files["existing"]))
    try:
        code = cli.main(argv)
    except SystemExit as exit_:  # argparse errors
        code = exit_.code
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert code == 2, captured
    assert len(lines) == 1, lines
    assert "Traceback" not in captured.err
    assert lines[0].startswith("headsize-tf"), lines[0]
    assert "error:" in lines[0], lines[0]
    assert fragment in lines[0], (fragment, lines[0])
    # Nothing written: no output, the existing directory untouched.
    assert not any(pathlib.Path(tmp_path).iterdir()), list(pathlib.Path(tmp_path).iterdir())
    assert sorted(os.listdir(files["existing"])) == before


def test_table_covers_every_command():
    assert len(CASES) >= 30
    commands = {c[1][0] for c in CASES}
    assert {
        "params",
        "train",
        "embed",
        "compress",
        "convert",
        "analyze",
        "prune",
        "tune",
        "export",
        "data",
        "demo",
    } <= commands


def test_quiet_commands():
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    for argv in (["params", "--match-widths", "512"], ["train", "--help"]):
        result = subprocess.run(
            [sys.executable, "-m", "headsize_tf", *argv],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert result.stderr == "", result.stderr


def test_native_xla_lines_stay_off_the_screen():
    # TensorFlow 2.20 logs "Compiled cluster using XLA!" through absl, before absl is
    # initialised, whatever TF_CPP_MIN_LOG_LEVEL says; on a terminal the CLI's quiet logs
    # drop it.
    code = (
        "from headsize_tf.cli import quiet_logs\n"
        "with quiet_logs():\n"
        "    import tensorflow as tf\n"
        "    f = tf.function(lambda x: x * 2.0 + 1.0, jit_compile=True)\n"
        "    print(f(tf.ones([3])).numpy().tolist())\n"
        "    tf.get_logger().error('an error stays')\n"
    )
    from tests.core.io_test import run_on_a_terminal

    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    status, out, shown = run_on_a_terminal(code, env)
    assert status == 0, shown
    assert out == "[3.0, 3.0, 3.0]\n"
    assert shown == "ERROR:tensorflow:an error stays\n", shown


def test_a_missing_extra_is_one_line_naming_it(monkeypatch, capsys):
    import argparse

    def missing(args):
        raise ModuleNotFoundError("No module named 'tensorflow'", name="tensorflow")

    args = argparse.Namespace(command="demo", func=missing)
    monkeypatch.setattr(cli, "build_parser", lambda: _Fixed(args))
    assert cli.main(["demo"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "headsize-tf demo: error: tensorflow is not installed; install the extra: pip install "
        '"headsize-tf[tf]"'
    ]


class _Fixed:
    """A parser whose parse gives fixed arguments."""

    def __init__(self, args):
        self.args = args

    def parse_args(self, argv):
        return self.args


def test_a_reader_that_leaves_ends_the_command_quietly():
    """`headsize-tf params | head -1`: no "Broken pipe" error line, SIGPIPE's status."""
    reader = subprocess.Popen(["head", "-1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    done = subprocess.run(
        [sys.executable, "-m", "headsize_tf", "params", "--match-widths", *["256"] * 2000],
        stdout=reader.stdin,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
    )
    reader.stdin.close()
    first = reader.stdout.read().decode()
    reader.wait()
    assert first.startswith("fixed_head encoder: width 256")
    assert done.returncode == 141 and done.stderr == ""
