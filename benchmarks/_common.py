"""Helpers shared by the benchmark scripts."""

from headsize_tf.core.io import save_figure, write_atomic, write_json

__all__ = ["save_figure", "write_atomic", "write_json"]
