"""Our tf_keras layers and models call without autograph, as Keras's own layers do.

tf_keras converts the `call` of every layer defined outside Keras with autograph
(and, recursively, every function that `call` calls) the first time a process
traces it: in a `tf.function`, in `fit`, and when a functional model is built.
Keras's built-in layers are not converted. Ours have no tensor-dependent Python
control flow either (their `if`s test shapes, options and `None`), so converting
them only costs time. Measured in a fresh process, with `headsize-tf train`'s steps
also unconverted (`training.train`): conversion takes 2.0 s (7.1 s with everything
converted) of about 115 CPU-seconds of three training test files, and 0.3 s (2.8 s)
of a short `headsize-tf train` run.

`without_autograph` marks a class's `call` with
`tf.autograph.experimental.do_not_convert`. Everything such a call runs is
then unconverted too, except inside a `tf.function` of its own: Model Garden's
layers inside `HeadsizeBertEncoder`, and an override of an extension point such
as `_logits_from_projected` (as a user's `_compute_attention` runs unconverted
under stock MHA's `call`, which is Keras code). Such an override writes
tensor-dependent branches and loops with `tf.cond` / `tf.while_loop`: a Python
`if` on a tensor raises in a `tf.function`. A subclass that overrides `call`
itself gets autograph for its own code where converted code calls it (a
`tf.function` of the user's, `fit`), not inside another unconverted call.
"""

from __future__ import annotations

from typing import TypeVar

import tensorflow as tf

T = TypeVar("T", bound=type)


def without_autograph(cls: T) -> T:
    """Class decorator: `cls.call` runs unconverted, and so does all it calls.

    Args:
      cls: A tf_keras layer or model class. An inherited `call` is wrapped on
        `cls`, so the parent class is unchanged.

    Returns:
      `cls`, modified in place.

    Example:

    >>> import tf_keras
    >>> @without_autograph
    ... class Scale(tf_keras.layers.Layer):
    ...     def call(self, x):
    ...         return 2.0 * x
    """
    method = cls.call
    unconverted = tf.autograph.experimental.do_not_convert(method)
    # A TensorFlow decorator: tf_keras reads the wrapped method's arguments (whether
    # `call` takes `training` and `mask`) through it.
    cls.call = tf.__internal__.decorator.make_decorator(method, unconverted)
    return cls
