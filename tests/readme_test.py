"""The README's `model.fit` example runs as written."""

import pathlib
import re

import numpy as np
import tensorflow as tf

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


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
