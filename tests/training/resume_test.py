"""Kill training with SIGKILL, rerun the same command: it resumes and ends as if never killed."""

import os
import signal
import subprocess
import tempfile
import time

import numpy as np
import pytest
import tensorflow as tf

from headsize_tf.training import train
from tests.training.lm_command import TINY_LM, train_lm_command

STEPS = 40
OVERRIDE = (
    f"trainer.train_steps={STEPS},trainer.checkpoint_interval=10,trainer.steps_per_loop=10,"
    "trainer.summary_interval=10,task.train_data.seed=1,task.train_data.deterministic=true,"
    "task.train_data.global_batch_size=4,"
    "task.model.attention.kind=fixed_head,task.model.attention.head_size=32"
)


def _command(model_dir: str, data_dir: str) -> list[str]:
    return train_lm_command(model_dir, data_dir, OVERRIDE)


def _env() -> dict[str, str]:
    return dict(os.environ, TF_DETERMINISTIC_OPS="1", TF_CPP_MIN_LOG_LEVEL="2")


def _model_and_optimizer_values(checkpoint: str) -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(checkpoint)
    return {
        name: reader.get_tensor(name)
        for name, _ in tf.train.list_variables(checkpoint)
        if name.startswith(("model/", "optimizer/")) and "ITERATOR" not in name
    }


class ResumeTest(tf.test.TestCase):
    @pytest.fixture(autouse=True)
    def _data(self, austen_data_dir, tmp_path):
        self.data_dir = str(austen_data_dir)
        self.tmp = tmp_path

    # Two trainer processes and a reference run (about 70 s): in the full run; resuming in
    # one process is tested in the default run (lm_keras3_test, heal_test, cli_decoder_test).
    @pytest.mark.slow
    def test_sigkill_and_resume_equals_uninterrupted(self):
        killed_dir = str(self.tmp / "killed")
        process = subprocess.Popen(
            _command(killed_dir, self.data_dir),
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.time() + 300
        # A checkpoint counts once the `checkpoint` state file names it: its .index file
        # is written first (a kill between the two leaves no checkpoint to resume from).
        while tf.train.latest_checkpoint(killed_dir) is None:
            self.assertIsNone(process.poll(), "training ended before it could be killed")
            self.assertLess(time.time(), deadline, "no checkpoint within 300 s")
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.wait()
        latest = tf.train.latest_checkpoint(killed_dir)
        step_at_kill = int(latest.rsplit("-", 1)[1])
        self.assertLess(step_at_kill, STEPS, "the kill came after training finished")

        # The same command again resumes; meanwhile the uninterrupted reference trains in
        # this process (the same `train.run` the command calls, with its default seed): a
        # third process would only add its start.
        with tempfile.TemporaryFile("w+") as out:
            resumed = subprocess.Popen(
                _command(killed_dir, self.data_dir),
                env=_env(),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
            try:
                reference_dir = str(self.tmp / "reference")
                train.run(
                    "headsize_lm/language_modeling",
                    reference_dir,
                    [TINY_LM],
                    OVERRIDE,
                    mode="train",
                    data_dir=self.data_dir,
                    seed=0,
                )
                returncode = resumed.wait(timeout=600)
            finally:
                if resumed.poll() is None:
                    resumed.kill()
                    resumed.wait()
            out.seek(0)
            printed = out.read()
        self.assertEqual(returncode, 0, printed[-2000:])
        self.assertIn(f"ckpt-{step_at_kill}", printed)  # restored

        got = _model_and_optimizer_values(tf.train.latest_checkpoint(killed_dir))
        want = _model_and_optimizer_values(tf.train.latest_checkpoint(reference_dir))
        self.assertTrue(tf.train.latest_checkpoint(killed_dir).endswith(f"ckpt-{STEPS}"))
        self.assertEqual(sorted(got), sorted(want))
        self.assertGreater(len(got), 20)
        for name in want:
            self.assertAllClose(got[name], want[name], atol=1e-6, msg=name)
