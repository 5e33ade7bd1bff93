"""headsize_tf: head size and head sharing as tunable capacity knobs for TF / Keras."""

__version__ = "0.1.0"
