"""Export of Keras 3 models as TF Serving SavedModels, from any Keras 3 backend.

A SavedModel is a TensorFlow graph, so the graph is built from a Keras 3
model on the TensorFlow backend. A model built on another backend (JAX) is
written to a temporary bundle in Keras' own format (`.keras`: the config and
the exact float weights, plus the vocabulary and tokenizer settings) and
rebuilt on TensorFlow in a subprocess (`KERAS_BACKEND=tensorflow`), which
builds the same module and writes the export. This was preferred to
converting the JAX computation with `jax2tf` (what `model.export` does on
JAX): the exported graph is then the same plain TensorFlow graph whichever
backend trained the model (it runs on any TF Serving device, where a
`jax2tf` graph holds StableHLO compiled for the exporting platform), greedy
decoding reuses the model's own key/value caches inside a `tf.while_loop`,
and one code path is tested. The cost is one extra Python process (about
10 s on a CPU).

The version directory `EXPORT_DIR/VERSION/` is written atomically by
`headsize_tf.data.serving_export.export` (shared with the tf_keras front);
it loads with `tensorflow` and `tensorflow_text` alone.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable

import keras

from headsize_tf.data.serving_export import check_export_version, export
from headsize_tf.keras3.modeling import CausalLM, DecoderLM
from headsize_tf.keras3.modeling.model_file import load_model_file, saved_class_name
from headsize_tf.keras3.pretrained import SentenceEncoder, load_sentence_encoder
from headsize_tf.keras3.pruning.classifier import HEAD_FILE, load_classifier
from headsize_tf.keras3.serving.encoder_module import EncoderServingModule
from headsize_tf.keras3.serving.language_model import LanguageModelServingModule, lm_tokenizer

TASKS = ("embedding", "sentence_prediction", "lm")
BUNDLE_FILE = "bundle.json"
# The package root, put first on the subprocess' path (the same headsize_tf as this one).
_ROOT = pathlib.Path(__file__).resolve().parents[3]
_REBUILD = (
    "import sys\n"
    "from headsize_tf.keras3.serving.export import export_bundle\n"
    "export_bundle(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == '1')\n"
)


def export_sentence_encoder(
    encoder: SentenceEncoder,
    export_dir: str | os.PathLike,
    *,
    version: int = 1,
    overwrite: bool = False,
) -> pathlib.Path:
    """Exports a Keras 3 `SentenceEncoder`: raw text in, `embeddings` out.

    Signatures `serving_default(text)` and `serve_ids(input_word_ids,
    input_mask)` -> `embeddings` float32 [batch, width] (the encoder's pooling
    and normalisation), as the tf_keras front's "embedding" export.

    Args:
      encoder: The encoder (any backend).
      export_dir: The model's base directory; the SavedModel goes to
        `export_dir/version/`.
      version: A positive int.
      overwrite: Replace an existing version.

    Returns:
      The version directory.

    Raises:
      ValueError: a bad version. FileExistsError: the version exists.
      RuntimeError: the TensorFlow subprocess (models of other backends) failed.

    Example:

    >>> encoder = load_sentence_encoder("minilm-l6")
    >>> export_sentence_encoder(encoder, "/tmp/export")
    PosixPath('/tmp/export/1')
    """
    check_export_version(export_dir, version, overwrite)
    if keras.backend.backend() == "tensorflow":
        return export(EncoderServingModule(encoder, "embedding"), export_dir, version, overwrite)

    def bundle(directory: pathlib.Path) -> dict:
        encoder.save(directory / "encoder")
        return {"task": "embedding"}

    return _export_on_tensorflow(bundle, export_dir, version, overwrite)


def export_classifier(
    encoder: SentenceEncoder,
    classifier: keras.Model,
    export_dir: str | os.PathLike,
    *,
    version: int = 1,
    overwrite: bool = False,
) -> pathlib.Path:
    """Exports a Keras 3 sentence classifier: raw text in, `logits` and `probabilities` out.

    Args:
      encoder: Its `SentenceEncoder` (the tokenizer and its settings).
      classifier: A Keras 3 model from the backbone's inputs (`token_ids`,
        `segment_ids`, `padding_mask`) to logits `[batch, classes]`, e.g.
        `headsize_tf.keras3.pruning.classifier.load_classifier(DIR)`.
      export_dir, version, overwrite: As `export_sentence_encoder`.

    Returns:
      The version directory.

    Example:

    >>> export_classifier(encoder, load_classifier("pruned", encoder), "/tmp/export")
    PosixPath('/tmp/export/1')
    """
    check_export_version(export_dir, version, overwrite)
    if keras.backend.backend() == "tensorflow":
        module = EncoderServingModule(encoder, "sentence_prediction", classifier)
        return export(module, export_dir, version, overwrite)

    def bundle(directory: pathlib.Path) -> dict:
        encoder.save(directory / "encoder")
        classifier.save(str(directory / "classifier.keras"))
        return {"task": "sentence_prediction"}

    return _export_on_tensorflow(bundle, export_dir, version, overwrite)


def export_causal_lm(
    lm: CausalLM | DecoderLM,
    vocab_file: str | os.PathLike | None,
    export_dir: str | os.PathLike,
    *,
    lower_case: bool = True,
    version: int = 1,
    overwrite: bool = False,
    max_length: int | None = None,
) -> pathlib.Path:
    """Exports a Keras 3 `CausalLM` with its vocabulary, or a `DecoderLM` with its own tokenizer.

    (`LanguageModelServingModule`.)

    Signatures: `serving_default(text)` / `serve_ids(input_word_ids,
    input_mask)` -> `log_likelihood`, `num_tokens`,
    `next_token_probabilities`; `generate(text, max_new_tokens)` ->
    `output_ids`, `continuation` (greedy).

    Args:
      lm: The `CausalLM` or `DecoderLM` (any backend).
      vocab_file: A `CausalLM`'s WordPiece vocabulary (e.g.
        `DATA_DIR/austen/vocab.txt` of `headsize-tf data prepare austen`); None
        for a `DecoderLM` (its tokenizer goes into the graph).
      max_length: Positions the export serves (default: the model's).
      lower_case: As the training data (the prepared corpora are lower-cased).
      export_dir, version, overwrite: As `export_sentence_encoder`.

    Returns:
      The version directory.

    Raises:
      ValueError: a vocabulary larger than the LM's `vocabulary_size`.

    Example:

    >>> export_causal_lm(lm, "data/austen/vocab.txt", "/tmp/lm_export")
    PosixPath('/tmp/lm_export/1')
    """
    check_export_version(export_dir, version, overwrite)
    if keras.backend.backend() == "tensorflow":
        module = LanguageModelServingModule(lm, vocab_file, lower_case, max_length)
        return export(module, export_dir, version, overwrite)
    decoder = isinstance(lm, DecoderLM)
    if not decoder:
        lm_tokenizer(lm, vocab_file, lower_case)  # Checked here, before the subprocess.

    def bundle(directory: pathlib.Path) -> dict:
        lm.save(str(directory / "lm.keras"))
        if not decoder:
            shutil.copyfile(vocab_file, directory / "vocab.txt")
        return {"task": "lm", "lower_case": bool(lower_case), "max_length": max_length}

    return _export_on_tensorflow(bundle, export_dir, version, overwrite)


def _export_on_tensorflow(
    write_bundle: Callable[[pathlib.Path], dict],
    export_dir: str | os.PathLike,
    version: int,
    overwrite: bool,
) -> pathlib.Path:
    """Writes a bundle, then `export_bundle` in a `KERAS_BACKEND=tensorflow` subprocess."""
    with tempfile.TemporaryDirectory(prefix="headsize_keras3_export-") as tmp:
        bundle = pathlib.Path(tmp)
        config = write_bundle(bundle)
        (bundle / BUNDLE_FILE).write_text(json.dumps(config))
        env = dict(os.environ, KERAS_BACKEND="tensorflow")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_ROOT), env.get("PYTHONPATH")]))
        argv = [str(bundle), str(export_dir), str(version), "1" if overwrite else "0"]
        done = subprocess.run(
            [sys.executable, "-c", _REBUILD, *argv], env=env, capture_output=True, text=True
        )
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise RuntimeError(
            "Exporting on the TensorFlow backend (a subprocess with KERAS_BACKEND=tensorflow) "
            f"failed: {lines[-1] if lines else f'exit status {done.returncode}'}"
        )
    return pathlib.Path(export_dir) / str(version)


def export_bundle(
    bundle: str | os.PathLike,
    export_dir: str | os.PathLike,
    version: int = 1,
    overwrite: bool = False,
) -> pathlib.Path:
    """Exports a bundle written for another backend's model (runs on the TensorFlow backend).

    The subprocess side of the export functions, run with
    `KERAS_BACKEND=tensorflow`.

    Args:
      bundle: A directory holding `bundle.json` ({"task": ..., and for "lm"
        "lower_case"}) and the task's files: `encoder/` (a `SentenceEncoder`
        checkpoint) and for "sentence_prediction" `classifier.keras`; or
        `lm.keras` and `vocab.txt`.
      export_dir, version, overwrite: As `export_sentence_encoder`.

    Returns:
      The version directory.

    Example:

    >>> export_bundle("/tmp/bundle", "/tmp/export", 1)  # in a TensorFlow-backend process
    PosixPath('/tmp/export/1')
    """
    bundle = pathlib.Path(bundle)
    config = json.loads((bundle / BUNDLE_FILE).read_text())
    task = config["task"]
    if task == "lm":
        lm = keras.saving.load_model(str(bundle / "lm.keras"))
        vocab = bundle / "vocab.txt"
        module = LanguageModelServingModule(
            lm,
            vocab if vocab.exists() else None,
            config["lower_case"],
            config.get("max_length"),
        )
    else:
        encoder = SentenceEncoder.load(bundle / "encoder")
        classifier = None
        if task == "sentence_prediction":
            classifier = keras.saving.load_model(str(bundle / "classifier.keras"))
        module = EncoderServingModule(encoder, task, classifier)
    return export(module, export_dir, version, overwrite)


def export_source(
    export_dir: str | os.PathLike,
    task: str,
    *,
    model: str | None = None,
    checkpoint: str | os.PathLike | None = None,
    vocab_file: str | os.PathLike | None = None,
    version: int = 1,
    overwrite: bool = False,
    decoder: str | os.PathLike | None = None,
    max_length: int | None = None,
) -> pathlib.Path:
    """`headsize-tf export --framework keras3`: loads the source, exports it, returns the path.

    Args:
      export_dir: The model's base directory (`--output`).
      task: "embedding" (`model`, a registered name, or `checkpoint`, a Keras 3
        `SentenceEncoder` or Hugging Face BERT directory), "sentence_prediction"
        (`checkpoint`: a directory of `headsize-tf prune --framework keras3`,
        with its classifier head) or "lm" (`checkpoint`: a `.keras` file of a
        `CausalLM`, and its `vocab_file`).
      model, checkpoint, vocab_file: The source (above).
      version, overwrite: As `export_sentence_encoder`.
      decoder: "lm": a pretrained decoder (`keras3.pretrained.load_decoder`: a
        registered name, `.gguf`, a Hugging Face or keras-hub directory, a
        `DecoderLM` `.keras` file), exported with its own tokenizer in-graph.
      max_length: "lm": positions the export serves (default: the model's).

    Raises:
      ValueError: a task this front does not export, or a source that does not
        fit the task (checked before anything is loaded or written).

    Example:

    >>> export_source("/tmp/lm_export", "lm", checkpoint="lm.keras", vocab_file="vocab.txt")
    PosixPath('/tmp/lm_export/1')
    """
    if task not in TASKS:
        raise ValueError(
            f"--framework keras3 exports the tasks {', '.join(TASKS)}; got {task!r} "
            "(translation models are tf_keras: drop --framework keras3)."
        )
    check_export_version(export_dir, version, overwrite)
    if task != "lm" and vocab_file:
        raise ValueError(
            "--vocab-file is for --task lm; an encoder checkpoint brings its own vocabulary."
        )
    if task == "embedding":
        encoder = load_sentence_encoder(model, checkpoint)
        return export_sentence_encoder(encoder, export_dir, version=version, overwrite=overwrite)
    if task == "sentence_prediction":
        if not checkpoint or not (pathlib.Path(checkpoint) / HEAD_FILE).is_file():
            raise ValueError(
                "--task sentence_prediction --framework keras3 needs --checkpoint DIR with a "
                f"classifier head ({HEAD_FILE}, written by `headsize-tf prune --framework keras3`)"
                f"; got {checkpoint or model!r}."
            )
        encoder = load_sentence_encoder(checkpoint=checkpoint)
        classifier = load_classifier(checkpoint, encoder)
        return export_classifier(
            encoder, classifier, export_dir, version=version, overwrite=overwrite
        )
    if decoder is not None:
        if vocab_file:
            raise ValueError("--vocab-file is a CausalLM's; a decoder brings its own tokenizer.")
        from headsize_tf.keras3.pretrained.decoders import load_decoder

        lm = load_decoder(decoder, max_sequence_length=max_length)
        return export_causal_lm(
            lm, None, export_dir, version=version, overwrite=overwrite, max_length=max_length
        )
    path = pathlib.Path(checkpoint) if checkpoint else None
    if path is None or path.suffix != ".keras" or not path.is_file():
        raise ValueError(
            "--task lm --framework keras3 needs --model-file FILE.keras, a saved Keras 3 "
            f"CausalLM; got {str(path) if path else model!r}."
        )
    if not vocab_file or not os.path.isfile(vocab_file):
        raise ValueError(
            "--task lm --framework keras3 needs --vocab-file, the WordPiece vocabulary the LM "
            f"was trained with (e.g. DATA_DIR/austen/vocab.txt); got {vocab_file!r}."
        )
    lm = _load_causal_lm(path)
    return export_causal_lm(lm, vocab_file, export_dir, version=version, overwrite=overwrite)


def _load_causal_lm(path: pathlib.Path) -> CausalLM:
    if saved_class_name(path) == "DecoderLM":  # Its own tokenizer: exported as a decoder.
        raise ValueError(
            f"{path} holds a DecoderLM (a Llama-family decoder with its own tokenizer); export "
            "it with --decoder."
        )
    lm = load_model_file(path, "a Keras 3 CausalLM")
    if not isinstance(lm, CausalLM):
        raise ValueError(f"{path} holds a {type(lm).__name__}, not a Keras 3 CausalLM.")
    return lm
