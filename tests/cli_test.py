"""The `headsize-tf` command line."""

import contextlib
import io
import json
import pathlib
import subprocess
import sys

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
            ("model_dir= is required.", "--model_dir is required."),
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
        args = parse(["prune", "--model_dir", str(model_dir), "--output", "o"])
        self.assertEqual(prune._source(args), "headsize_lm/language_modeling")
