"""keras3.pretrained.decoder_text: a decoder's text windows start as its model file says."""

from __future__ import annotations

import types

import numpy as np
import pytest

from headsize_tf.keras3.pretrained.decoder_text import decoder_lm_text
from tests.keras3.modeling.decoder_lm_test import bpe_tokenizer

LINES = [f"line {i} of some text, with words enough for windows" for i in range(200)]


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "text.txt"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return path


def _windows(tokenizer, text_file, **options):
    lm = types.SimpleNamespace(tokenizer=tokenizer)
    return decoder_lm_text(lm, 9, data_file=text_file, **options)


def test_windows_start_with_the_start_token_where_the_model_adds_one(text_file):
    adds = bpe_tokenizer()  # <s> = 0, added.
    bare = type(adds).from_config({**adds.get_config(), "add_start_token": False})
    with_start = _windows(adds, text_file)
    without = _windows(bare, text_file)
    assert with_start.train.shape[1] == without.train.shape[1] == 9
    assert (with_start.train[:, 0] == 0).all() and (with_start.held_out[:, 0] == 0).all()
    assert (without.train != 0).all()  # Nine text tokens per window, no <s>.
    # The text tokens are the same stream: eight per window with the start token, nine without.
    np.testing.assert_array_equal(with_start.train[0, 1:], without.train[0, :8])
    # A study can fix its protocol either way.
    np.testing.assert_array_equal(
        _windows(bare, text_file, start_token=True).train, with_start.train
    )
    np.testing.assert_array_equal(_windows(adds, text_file, start_token=False).train, without.train)


def test_a_start_token_asked_of_a_tokenizer_without_one_is_an_error(text_file):
    none = type(bpe_tokenizer()).from_config(
        {**bpe_tokenizer().get_config(), "start_token_id": None}
    )
    with pytest.raises(ValueError, match="start_token=True, but the decoder's tokenizer has no"):
        _windows(none, text_file, start_token=True)
