"""MultiWorkerMirroredStrategy: two worker processes on 127.0.0.1 end with identical weights."""

import json
import os
import socket
import subprocess

import pytest
import tensorflow as tf

from tests.training.lm_command import train_lm_command

OVERRIDE = (
    "trainer.train_steps=40,trainer.checkpoint_interval=40,trainer.steps_per_loop=20,"
    "trainer.summary_interval=20,task.train_data.global_batch_size=8,"
    "task.model.attention.kind=collaborative,task.model.attention.shared_key_dim=32"
)


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


class MultiWorkerTest(tf.test.TestCase):
    @pytest.fixture(autouse=True)
    def _data(self, austen_data_dir, tmp_path):
        self.data_dir = str(austen_data_dir)
        self.tmp = tmp_path

    @pytest.mark.slow  # end to end, in the full run (docs/testing.md)
    def test_two_workers_train_to_identical_weights(self):
        workers = [f"127.0.0.1:{port}" for port in _free_ports(2)]
        processes, model_dirs = [], []
        for index in range(2):
            model_dir = str(self.tmp / f"worker_{index}")
            model_dirs.append(model_dir)
            tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
            env = dict(os.environ, TF_CONFIG=json.dumps(tf_config), TF_CPP_MIN_LOG_LEVEL="2")
            processes.append(
                subprocess.Popen(
                    train_lm_command(
                        model_dir,
                        self.data_dir,
                        OVERRIDE,
                        "--strategy",
                        "multi_worker_mirrored",
                    ),
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        outputs = []
        try:
            for process in processes:
                outputs.append(process.communicate(timeout=600))
        finally:
            for process in processes:
                process.kill()
        for process, (out, err) in zip(processes, outputs, strict=True):
            self.assertEqual(process.returncode, 0, err[-2000:])
            self.assertIn("replicas: 2", out)

        digests = [
            line.split(": ", 1)[1]
            for out, _ in outputs
            for line in out.splitlines()
            if line.startswith("weights_sha256: ")
        ]
        self.assertLen(digests, 2)
        self.assertEqual(digests[0], digests[1])  # Bit-identical weights on both workers.
        # The chief's checkpoint holds trained (not initial) weights of that digest.
        checkpoint = tf.train.latest_checkpoint(model_dirs[0])
        self.assertTrue(checkpoint.endswith("ckpt-40"), checkpoint)
