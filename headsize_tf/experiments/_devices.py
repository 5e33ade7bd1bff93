"""The machine a run used, in one line for its record (the reproduction's runners)."""

from __future__ import annotations

import os
import pathlib
import platform


def cpu_description() -> str:
    """The processor's model name and core count."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"CPU: {cpu} ({os.cpu_count()} cores)"


def device_description() -> str:
    """The accelerator (or CPU) a tf_keras run used, for its record."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        return f"GPU: {details.get('device_name', gpus[0].name)}"
    return cpu_description()
