"""The `headsize-tf` command line."""

import argparse
import contextlib
import importlib
import io
import json
import pathlib
import re
import subprocess
import sys
from unittest import mock

import tensorflow as tf

from headsize_tf import __version__, cli, params


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as exit_:
            code = exit_.code
    return code, out.getvalue(), err.getvalue()


class CliTest(tf.test.TestCase):
    def test_version(self):
        code, out, _ = _run(["--version"])
        self.assertEqual(code, 0)
        self.assertEqual(out.strip(), f"headsize-tf {__version__}")

    def test_module_entry_point_help(self):
        result = subprocess.run(
            [sys.executable, "-m", "headsize_tf", "--help"],
            capture_output=True,
            text=True,
            check=True,
        )
        self.assertIn("usage: headsize-tf", result.stdout)
        self.assertIn("params", result.stdout)

    def test_params_table_equals_library(self):
        code, out, _ = _run(["params", "--width", "256", "--match-widths", "512"])
        self.assertEqual(code, 0)
        row = [line for line in out.splitlines() if line.startswith("| 512 |")][0]
        cells = [c.strip() for c in row.strip("|").split("|")]
        baseline = params.EncoderSpec(
            vocab_size=32000,
            width=512,
            num_layers=6,
            attention=params.AttentionSpec("standard", num_heads=8),
            max_sequence_length=256,
        )
        candidate = params.EncoderSpec(
            vocab_size=32000,
            width=256,
            num_layers=6,
            attention=params.AttentionSpec("fixed_head", num_heads=8, head_size=32),
            max_sequence_length=256,
        )
        self.assertEqual(int(cells[2].replace(",", "")), params.encoder_params(baseline).trainable)
        self.assertEqual(int(cells[3]), params.match_encoder_heads(baseline, candidate))

    def test_bad_head_size(self):
        code, _, err = _run(["params", "--head-size", "abc"])
        self.assertEqual(code, 2)
        self.assertIn("expected a positive integer or \"sequence_length\", got 'abc'", err)

    def test_invalid_combination_reports_error(self):
        code, _, err = _run(
            [
                "params",
                "--attention-type",
                "standard",
                "--width",
                "10",
                "--num-heads",
                "4",
                "--match-widths",
            ]
        )
        self.assertEqual(code, 2)
        self.assertIn("width (10) is not a multiple of num_heads (4)", err)

    def test_library_arguments_show_as_the_flags_that_set_them(self):
        for message, shown in (
            ("step= must be a fraction in (0, 1); got 0.", "--step must be"),
            ("match_params=True needs budget_params=.", "--match-params needs --budget-params."),
            ("model_dir= is required.", "--model-dir is required."),
            ("no column 'x' (text_pair_column=);", "(--text-pair-column);"),
            ("`key_dim=16` and a.b=value stay", "`key_dim=16` and a.b=value stay"),
        ):
            self.assertIn(shown, cli._as_flags(message))

    def test_prune_looks_every_source_up_in_one_registry(self):
        from headsize_tf.cli import prune

        parse = cli.build_parser().parse_args
        for framework in ("tf_keras", "keras3"):
            args = parse(
                ["prune", "--framework", framework, "--model", "minilm-l6", "--output", "o"]
            )
            self.assertIs(
                prune.RUNNERS[prune._source(args)], prune.RUNNERS[f"pretrained/{framework}"]
            )
        model_dir = pathlib.Path(self.get_temp_dir())
        (model_dir / "headsize_experiment.json").write_text(
            json.dumps({"experiment": "headsize_lm/language_modeling"})
        )
        args = parse(["prune", "--model-dir", str(model_dir), "--output", "o"])
        self.assertEqual(prune._source(args), "headsize_lm/language_modeling")


# --- One vocabulary: each concept one spelling; the old spellings are hidden aliases ----------

# (old argv, the same in the one vocabulary): each pair parses to the same arguments.
OLD_SPELLINGS = [
    (
        ["train", "--experiment", "e", "--model_dir", "d", "--config_file", "a.yaml"]
        + ["--config-file", "b.yaml", "--params_override", "x=1"],
        ["train", "--experiment", "e", "--model-dir", "d", "--config-file", "a.yaml"]
        + ["--config-file", "b.yaml", "--params-override", "x=1"],
    ),
    (
        ["tune", "--experiment", "e", "--config_file", "a.yaml", "--search-space", "s"]
        + ["--output", "o"],
        ["tune", "--experiment", "e", "--config-file", "a.yaml", "--search-space", "s"]
        + ["--output", "o"],
    ),
    (
        ["data", "prepare", "austen", "--seq-length", "64"],
        ["data", "prepare", "austen", "--sequence-length", "64"],
    ),
    (
        ["data", "squad", "--vocab-file", "v.txt", "--max-seq-length", "256"],
        ["data", "squad", "--vocab-file", "v.txt", "--sequence-length", "256"],
    ),
    (
        ["embed", "--model_dir", "d", "--input", "i", "--output", "o", "--max-seq-length", "8"],
        ["embed", "--model-dir", "d", "--input", "i", "--output", "o", "--sequence-length", "8"],
    ),
    (
        ["compress", "--model_dir", "d", "--shared-key-dim", "8", "--output", "o"],
        ["compress", "--model-dir", "d", "--shared-key-dim", "8", "--output", "o"],
    ),
    (
        ["prune", "--model_dir", "d", "--output", "o"],
        ["prune", "--model-dir", "d", "--output", "o"],
    ),
    (
        ["export", "--model_dir", "d", "--task", "lm", "--output", "o"],
        ["export", "--model-dir", "d", "--task", "lm", "--output", "o"],
    ),
    (
        ["export", "--decoder", "x.gguf", "--task", "lm", "--output", "o", "--max-length", "64"],
        ["export", "--decoder", "x.gguf", "--task", "lm", "--output", "o"]
        + ["--max-sequence-length", "64"],
    ),
    (
        ["convert", "--model_dir", "d", "--to", "grouped", "--kv-heads", "2", "--output", "o"],
        ["convert", "--model-dir", "d", "--to", "grouped", "--kv-heads", "2", "--output", "o"],
    ),
    (
        ["convert", "--framework", "keras3", "--model", "lm.keras", "--to", "latent"]
        + ["--kv-rank", "8", "--vocab", "v.txt", "--output", "o"],
        ["convert", "--framework", "keras3", "--model-file", "lm.keras", "--to", "latent"]
        + ["--kv-rank", "8", "--vocab-file", "v.txt", "--output", "o"],
    ),
]


def _parse(argv):
    args = vars(cli.build_parser().parse_args(argv))
    args.pop("func")
    return args


def _subparsers(parser, path=("headsize-tf",)):
    """(path, parser) of every command and subcommand."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from _subparsers(sub, (*path, name))


def _spelled(flag: str, text: str) -> bool:
    """Whether `text` holds the flag itself (not as the start of a longer one)."""
    return re.search(re.escape(flag) + r"(?![\w-])", text) is not None


class VocabularyTest(tf.test.TestCase):
    def test_old_spellings_parse_to_the_same_arguments(self):
        for old, new in OLD_SPELLINGS:
            with self.subTest(" ".join(old)):
                self.assertEqual(_parse(old), _parse(new))

    def test_help_shows_only_the_new_spellings(self):
        hidden_seen = set()
        for path, parser in _subparsers(cli.build_parser()):
            text = parser.format_help()
            shown = {a.dest for a in parser._actions if a.help != argparse.SUPPRESS}
            for action in parser._actions:
                if action.help != argparse.SUPPRESS:
                    continue
                self.assertIn(action.dest, shown, (path, action.option_strings))
                for flag in action.option_strings:
                    hidden_seen.add(flag)
                    self.assertFalse(_spelled(flag, text), (path, flag))
        self.assertEqual(
            hidden_seen,
            {
                "--model_dir",
                "--config_file",
                "--params_override",
                "--seq-length",
                "--max-seq-length",
                "--vocab",
                "--model",  # convert's, a .keras file: --model names a registered model elsewhere
                "--max-length",
            },
        )
        helps = {
            " ".join(path): parser.format_help() for path, parser in _subparsers(cli.build_parser())
        }
        for command, flags in {
            "headsize-tf train": ["--model-dir", "--config-file", "--params-override"],
            "headsize-tf tune": ["--config-file"],
            "headsize-tf data prepare": ["--sequence-length"],
            "headsize-tf data squad": ["--sequence-length"],
            "headsize-tf embed": ["--model-dir", "--sequence-length", "--vocab-file", "--model"],
            "headsize-tf convert": ["--model-dir", "--model-file", "--vocab-file"],
            "headsize-tf export": ["--model-dir", "--model-file", "--max-sequence-length"],
            "headsize-tf params": ["--max-sequence-length"],
        }.items():
            for flag in flags:
                self.assertTrue(_spelled(flag, helps[command]), (command, flag))

    def test_sequence_length_is_the_data_window_max_sequence_length_the_positions(self):
        users = {
            " ".join(path): {s for a in parser._actions for s in a.option_strings}
            for path, parser in _subparsers(cli.build_parser())
        }
        window = {c for c, flags in users.items() if "--sequence-length" in flags}
        limit = {c for c, flags in users.items() if "--max-sequence-length" in flags}
        self.assertEqual(
            window,
            {
                "headsize-tf data prepare",
                "headsize-tf data squad",
                "headsize-tf embed",
                "headsize-tf convert",
            },
        )
        self.assertEqual(limit, {"headsize-tf params", "headsize-tf export"})

    def test_model_names_a_registered_model_everywhere(self):
        from headsize_tf.cli._args import _PretrainedNames

        for path, parser in _subparsers(cli.build_parser()):
            for action in parser._actions:
                if "--model" in action.option_strings and action.help != argparse.SUPPRESS:
                    self.assertIsInstance(action.choices, _PretrainedNames, path)

    def test_convert_model_of_a_keras_file_is_the_model_file(self):
        existing = pathlib.Path(self.get_temp_dir()) / "lm_without_suffix"
        existing.write_text("x")
        base = ["convert", "--to", "grouped", "--kv-heads", "1", "--output", "o"]
        for value in ("lm.keras", str(existing)):
            args = _parse([*base, "--model", value])
            self.assertEqual(args["model_file"], value)
            self.assertNotIn("model", args)
        code, _, err = _run([*base, "--model", "minilm-l6"])
        self.assertEqual(code, 2)
        lines = err.strip().splitlines()
        self.assertEqual(len(lines), 1, lines)
        self.assertIn("argument --model: expected a .keras file", lines[0])
        self.assertIn("'minilm-l6'", lines[0])
        code, _, err = _run([*base, "--model", "lm.keras", "--model-file", "lm.keras"])
        self.assertEqual(code, 2)
        self.assertIn("not allowed with argument", err)

    def test_a_required_option_with_an_old_spelling_names_the_new_one_when_missing(self):
        code, _, err = _run(["train", "--experiment", "e"])
        self.assertEqual(code, 2)
        self.assertIn("one of the arguments --model-dir --print-config is required", err)
        self.assertNotIn("--model_dir", err)

    def test_commands_on_either_front_dispatch_by_one_source_key(self):
        from headsize_tf.cli import _args, compress, convert, embed, export, prune

        parse = cli.build_parser().parse_args
        for module, argv, key in [
            (embed, ["embed", "--model", "minilm-l6"], "pretrained/tf_keras"),
            (
                embed,
                ["embed", "--framework", "keras3", "--model", "minilm-l6"],
                "pretrained/keras3",
            ),
            (compress, ["compress", "--model-dir", "d", "--shared-key-dim", "8"], "model_dir"),
            (export, ["export", "--model-file", "m.keras", "--task", "lm"], "model_file"),
            (convert, ["convert", "--decoder", "x.gguf", "--to", "grouped"], "decoder"),
            (prune, ["prune", "--keras-hub-preset", "p"], "keras_hub"),
        ]:
            with self.subTest(" ".join(argv)):
                extra = ["--input", "i"] if module is embed else []
                args = parse([*argv, *extra, "--output", "o"])
                self.assertEqual(_args.model_source(args), key)
                self.assertIs(_args.dispatch(module.RUNNERS, args), module.RUNNERS[key])


# The experiment modules with a `main`: each requires --output; those with a report-only
# mode spell it --report-only (--summarize-only: the hidden old spelling).
EXPERIMENT_MAINS = [
    "attention_rank",
    "bottleneck.__main__",
    "compression_study",
    "kv_sharing_smollm2",
    "kv_sharing_study",
    "kv_translation_study",
    "lm_pruning_study",
    "pruning_study",
    "reproduce",
    "reproduction.__main__",
    "translation_pruning_study",
]


class _Parsed(Exception):
    pass


def _main_arguments(main, argv):
    """The arguments `main(argv)` parses, without running it."""
    parse = argparse.ArgumentParser.parse_args

    def parsed(self, args=None, namespace=None):
        raise _Parsed(parse(self, args, namespace))

    with mock.patch.object(argparse.ArgumentParser, "parse_args", parsed):
        try:
            main(argv)
        except _Parsed as done:
            return vars(done.args[0])
    raise AssertionError("main did not parse its arguments")


class ExperimentMainsTest(tf.test.TestCase):
    def test_output_is_required_and_report_only_shared(self):
        for name in EXPERIMENT_MAINS:
            with self.subTest(name):
                main = importlib.import_module(f"headsize_tf.experiments.{name}").main
                err = io.StringIO()
                with contextlib.redirect_stderr(err), self.assertRaises(SystemExit) as exit_:
                    _main_arguments(main, [])
                self.assertEqual(exit_.exception.code, 2)
                self.assertIn("the following arguments are required: --output", err.getvalue())
                out = io.StringIO()
                with contextlib.redirect_stdout(out), self.assertRaises(SystemExit) as exit_:
                    main(["--help"])
                self.assertEqual(exit_.exception.code, 0)
                self.assertFalse(_spelled("--summarize-only", out.getvalue()))
                self.assertTrue(_spelled("--report-only", out.getvalue()))
                args = _main_arguments(main, ["--output", "o"])
                self.assertEqual(args["output"], "o")
                self.assertFalse(args["report_only"])
                old = _main_arguments(main, ["--output", "o", "--summarize-only"])
                new = _main_arguments(main, ["--output", "o", "--report-only"])
                self.assertTrue(new["report_only"])
                self.assertEqual(old, new)
                if "work_dir" in args:  # Checkpoints outlive /tmp: under the cache root.
                    self.assertIn("/headsize_tf/work/", args["work_dir"])
