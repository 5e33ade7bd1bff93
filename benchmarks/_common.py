"""Helpers shared by the benchmark scripts."""

from headsize_tf.io_utils import save_figure, write_atomic, write_json

__all__ = ["save_figure", "write_atomic", "write_json"]
