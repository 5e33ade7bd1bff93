"""The README: its two `model.fit` examples run as written, and it stays short.

The generic checks of every code block and link (README and docs/) are in
`tests/docs_test.py`.
"""

import pathlib
import re

import numpy as np
import tensorflow as tf

from tests.docs_test import code_blocks

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DEMO = 'python3 -m venv .venv && .venv/bin/pip install -e ".[garden]" && .venv/bin/headsize-tf demo'
TESTS = 'python3 -m venv .venv && .venv/bin/pip install -e ".[test]" && .venv/bin/python -m pytest'


class ReadmeTest(tf.test.TestCase):
    def test_model_fit_example(self):
        blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
        self.assertTrue(blocks, "README has no python example")
        namespace: dict = {}
        exec(compile(blocks[0], "README.md", "exec"), namespace)  # noqa: S102
        losses = namespace["model"].history.history["loss"]
        self.assertLen(losses, 2)
        self.assertTrue(np.all(np.isfinite(losses)))
        self.assertLessEqual(len(blocks[0].strip().splitlines()), 10)

    def test_keras3_model_fit_example(self):
        blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
        keras3 = [b for b in blocks if "headsize_tf.keras3" in b]
        self.assertTrue(keras3, "README has no Keras 3 example")
        namespace: dict = {}
        exec(compile(keras3[0], "README.md", "exec"), namespace)  # noqa: S102
        losses = namespace["model"].history.history["loss"]
        self.assertLen(losses, 2)
        self.assertTrue(np.all(np.isfinite(losses)))
        self.assertLessEqual(len(keras3[0].strip().splitlines()), 10)

    def test_every_python_block_is_an_example_run_here(self):
        python = [b for b in code_blocks(README) if b.language == "python"]
        self.assertLen(python, 2)  # The two above; a new one needs its own test here.
        self.assertTrue(all(b.mark is None for b in python))

    def test_short(self):
        self.assertLessEqual(len(README.read_text().splitlines()), 150)

    def test_fresh_machine_commands(self):
        """The two commands, as one-line shell blocks; CI runs exactly the test command."""
        bash = [b.code.strip() for b in code_blocks(README) if b.language == "bash"]
        self.assertIn(DEMO, bash)
        self.assertIn(TESTS, bash)
        ci = (ROOT / ".ci" / "run").read_text()
        self.assertIn('pip install --quiet -e ".[test]"', ci)
        self.assertIn(".venv/bin/python -m pytest ", ci)

    def test_sections(self):
        headings = re.findall(r"^#+ (.*)$", README.read_text(), flags=re.M)
        for heading in (
            "On a fresh machine",
            "`model.fit` in ten lines",
            "Which front?",
            "Results",
        ):
            self.assertIn(heading, headings)

    def test_results_table_links_each_result(self):
        rows = [line for line in README.read_text().splitlines() if line.startswith("| [")]
        self.assertGreaterEqual(len(rows), 10)
        for row in rows:
            self.assertRegex(row, r"^\| \[[^\]]+\]\(results/[^)]+\) \| .+ \|$")
