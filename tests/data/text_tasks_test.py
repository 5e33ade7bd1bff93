"""Labelled text tasks from CSV / TSV / JSONL files and TFDS GLUE (mock data): rows and errors."""

import json
import pathlib
from unittest import mock

import numpy as np
import pytest

from headsize_tf.data import text_tasks as tt
from headsize_tf.data.splits import split_of
from headsize_tf.data.text_tasks import TextTaskError, load_text_file

# sha1("review number {i}") % 10 == 1 for these i < 40: pinned, so the split
# is the same on every machine and Python run (unlike hash()).
DEV_OF_40 = [14, 22, 25, 27, 33, 35, 39]


def _write(path: pathlib.Path, text: str | bytes) -> pathlib.Path:
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _csv_rows(n: int = 40, sep: str = ",") -> str:
    rows = [f"text{sep}label"] + [
        f"review number {i}{sep}{'pos' if i % 2 else 'neg'}" for i in range(n)
    ]
    return "\n".join(rows) + "\n"


def _one_line_error(err: pytest.ExceptionInfo, *fragments: str) -> str:
    message = str(err.value)
    assert "\n" not in message, message
    assert isinstance(err.value, ValueError)
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    return message


# ----------------------------------------------------------------- formats


def test_csv_with_string_labels_and_hash_split(tmp_path):
    task = load_text_file(_write(tmp_path / "reviews.csv", _csv_rows()), "text", "label")
    assert task.label_names == ("neg", "pos")
    assert task.label_map == {"neg": 0, "pos": 1}
    assert task.num_classes == 2 and not task.is_pair
    assert task.dev_texts == [f"review number {i}" for i in DEV_OF_40]
    assert len(task.train_texts) == 40 - len(DEV_OF_40)
    assert task.train_labels.dtype == np.int32
    expected = [i % 2 for i in range(40) if i not in DEV_OF_40]
    assert task.train_labels.tolist() == expected
    assert task.dev_labels.tolist() == [i % 2 for i in DEV_OF_40]
    info = task.describe()
    assert info["label_map"] == {"neg": 0, "pos": 1}
    assert (info["train_examples"], info["dev_examples"]) == (33, 7)
    json.dumps(info)  # JSON-ready


def test_tsv_reads_quotes_literally(tmp_path):
    text = _csv_rows(sep="\t").replace("review number 3\t", 'review "number 3\t')
    task = load_text_file(_write(tmp_path / "r.tsv", text), "text", "label")
    assert 'review "number 3' in task.train_texts
    assert len(task.train_texts) + len(task.dev_texts) == 40


def test_csv_quoted_fields_crlf_and_bom(tmp_path):
    text = '\ufefftext,label\r\n"a, quoted ""text""",x\r\nplain,y\r\n' + "".join(
        f"review number {i},{'xy'[i % 2]}\r\n" for i in range(40)
    )
    task = load_text_file(_write(tmp_path / "r.csv", text), "text", "label")
    assert 'a, quoted "text"' in task.train_texts + task.dev_texts
    assert task.label_names == ("x", "y")


def test_jsonl_int_labels_sort_numerically(tmp_path):
    lines = [
        json.dumps({"text": f"review number {i}", "label": [1, 2, 10][i % 3], "id": i})
        for i in range(40)
    ]
    lines.append(json.dumps({"text": "line\u2028separator", "label": 2}, ensure_ascii=False))
    task = load_text_file(_write(tmp_path / "r.jsonl", "\n".join(lines) + "\n\n"), "text", "label")
    assert task.label_names == ("1", "2", "10")  # not "1", "10", "2"
    assert "line\u2028separator" in task.train_texts + task.dev_texts
    assert task.dev_labels.tolist() == [{1: 0, 2: 1, 10: 2}[[1, 2, 10][i % 3]] for i in DEV_OF_40]


def test_data_format_overrides_the_extension(tmp_path):
    task = load_text_file(_write(tmp_path / "r.txt", _csv_rows()), data_format="csv")
    assert len(task.train_texts) == 33


def test_sentence_pairs(tmp_path):
    rows = ["premise,hypothesis,gold"] + [f"p{i},h{i},{['e', 'n', 'c'][i % 3]}" for i in range(60)]
    task = load_text_file(
        _write(tmp_path / "nli.csv", "\n".join(rows)),
        "premise",
        "gold",
        text_pair_column="hypothesis",
    )
    assert task.is_pair and task.text_columns == ("premise", "hypothesis")
    assert task.label_names == ("c", "e", "n")
    everything = task.train_texts + task.dev_texts
    assert sorted(everything) == sorted((f"p{i}", f"h{i}") for i in range(60))
    assert task.dev_texts == [
        (f"p{i}", f"h{i}") for i in range(60) if split_of(f"p{i}\th{i}") == "dev"
    ]
    assert task.dev_texts


def test_split_column(tmp_path):
    rows = ["text,label,part"]
    rows += [f"t{i},{i % 2},train" for i in range(6)]
    rows += ["d0,0,dev", "d1,1,Validation", "x0,,test", "x1,,TEST"]  # test labels are not read
    task = load_text_file(_write(tmp_path / "s.csv", "\n".join(rows)), split_column="part")
    assert task.train_texts == [f"t{i}" for i in range(6)]
    assert task.dev_texts == ["d0", "d1"]
    assert task.test_rows == 2
    assert task.label_names == ("0", "1")
    assert task.split_rule == "column 'part'"


def test_empty_texts_are_kept(tmp_path):
    text = _csv_rows().replace("review number 2,", ",").replace("review number 14,", ",")
    task = load_text_file(_write(tmp_path / "e.csv", text))
    # Kept, and both in train: identical texts land in the same split.
    assert task.train_texts.count("") == 2 and "" not in task.dev_texts
    assert len(task.train_texts) + len(task.dev_texts) == 40


def test_split_of_is_stable_and_about_ten_percent():
    assert [i for i in range(40) if split_of(f"review number {i}") == "dev"] == DEV_OF_40
    splits = [split_of(f"sentence {i}") for i in range(5000)]
    for split in ("dev", "test"):
        assert 0.09 < splits.count(split) / 5000 < 0.11, (split, splits.count(split))


# -------------------------------------------------------------- bad files


def test_missing_file(tmp_path):
    with pytest.raises(TextTaskError) as err:
        load_text_file(tmp_path / "nope.csv")
    _one_line_error(err, "nope.csv", "does not exist")


def test_unknown_extension(tmp_path):
    with pytest.raises(TextTaskError) as err:
        load_text_file(_write(tmp_path / "data.xlsx", _csv_rows()))
    _one_line_error(err, "data.xlsx", "unknown extension '.xlsx'", "data_format=")


def test_unknown_format(tmp_path):
    with pytest.raises(TextTaskError) as err:
        load_text_file(_write(tmp_path / "d.csv", _csv_rows()), data_format="xml")
    _one_line_error(err, "'xml'", "csv")


def test_empty_file(tmp_path):
    for name, text in (("e.csv", ""), ("w.tsv", "\n \n"), ("e.jsonl", "")):
        with pytest.raises(TextTaskError) as err:
            load_text_file(_write(tmp_path / name, text))
        _one_line_error(err, name, "is empty")


def test_header_only(tmp_path):
    with pytest.raises(TextTaskError) as err:
        load_text_file(_write(tmp_path / "h.csv", "text,label\n"))
    _one_line_error(err, "h.csv", "no rows")


def test_missing_column_lists_the_columns(tmp_path):
    path = _write(tmp_path / "r.csv", _csv_rows())
    with pytest.raises(TextTaskError) as err:
        load_text_file(path, "sentence", "label")
    _one_line_error(err, "r.csv", "no column 'sentence' (text_column=)", "['text', 'label']")
    with pytest.raises(TextTaskError) as err:
        load_text_file(path, text_pair_column="hypothesis")
    _one_line_error(err, "no column 'hypothesis' (text_pair_column=)")
    path = _write(tmp_path / "r.jsonl", '{"text": "a", "y": 1}\n{"text": "b", "y": 0}\n')
    with pytest.raises(TextTaskError) as err:
        load_text_file(path, "text", "label")
    _one_line_error(err, "r.jsonl", "no column 'label' (label_column=)", "['text', 'y']")


def test_one_class_only(tmp_path):
    text = _csv_rows().replace(",neg", ",pos")
    with pytest.raises(TextTaskError) as err:
        load_text_file(_write(tmp_path / "one.csv", text))
    _one_line_error(err, "one.csv", "one class only", "'pos'", "'label'")


def test_train_rows_of_one_class(tmp_path):
    rows = ["text,label,split", "a,x,train", "b,x,train", "c,y,dev"]
    with pytest.raises(TextTaskError) as err:
        load_text_file(_write(tmp_path / "t.csv", "\n".join(rows)), split_column="split")
    _one_line_error(err, "t.csv", "train rows have one class only")


def test_not_utf8(tmp_path):
    data = _csv_rows().encode() + "café,pos\n".encode("latin-1")
    with pytest.raises(TextTaskError) as err:
        load_text_file(_write(tmp_path / "latin1.csv", data))
    _one_line_error(err, "latin1.csv", "not UTF-8", "byte 0xe9 on line 42")
    with pytest.raises(TextTaskError) as err:  # after a byte-order mark
        load_text_file(_write(tmp_path / "bom.csv", b"\xef\xbb\xbf" + data))
    _one_line_error(err, "bom.csv", "byte 0xe9 on line 42")


def test_missing_labels(tmp_path):
    text = _csv_rows().replace("review number 5,pos", "review number 5,")
    with pytest.raises(TextTaskError) as err:
        load_text_file(_write(tmp_path / "m.csv", text))
    _one_line_error(err, "m.csv", "line 7 has no label in 'label'")
    lines = ['{"text": "a", "label": 1}', '{"text": "b", "label": null}']
    with pytest.raises(TextTaskError) as err:
        load_text_file(_write(tmp_path / "m.jsonl", "\n".join(lines)))
    _one_line_error(err, "m.jsonl", "line 2 has no label in 'label'")
    lines = ['{"text": "a", "label": 1}', '{"text": "b"}']
    with pytest.raises(TextTaskError) as err:
        load_text_file(_write(tmp_path / "k.jsonl", "\n".join(lines)))
    _one_line_error(err, "k.jsonl", "line 2 has no label in 'label'")


def test_missing_text_in_jsonl(tmp_path):
    lines = ['{"text": "a", "label": 1}', '{"text": null, "label": 0}']
    with pytest.raises(TextTaskError) as err:
        load_text_file(_write(tmp_path / "n.jsonl", "\n".join(lines)))
    _one_line_error(err, "n.jsonl", "line 2 has no text in 'text'")
    lines = ['{"text": "a", "label": 1}', '{"text": ["b"], "label": 0}']
    with pytest.raises(TextTaskError) as err:
        load_text_file(_write(tmp_path / "l.jsonl", "\n".join(lines)))
    _one_line_error(err, "l.jsonl", "line 2", "'text' is a JSON list")


def test_bad_split_value(tmp_path):
    rows = ["text,label,split", "a,x,train", "b,y,holdout"]
    with pytest.raises(TextTaskError) as err:
        load_text_file(_write(tmp_path / "s.csv", "\n".join(rows)), split_column="split")
    _one_line_error(err, "s.csv", "line 3", "'holdout'", "'split'")


def test_ragged_row(tmp_path):
    text = _csv_rows().replace("review number 4,neg", "review, number 4,neg")
    with pytest.raises(TextTaskError) as err:
        load_text_file(_write(tmp_path / "r.csv", text))
    _one_line_error(err, "r.csv", "line 6 has 3 fields; its header has 2")


def test_bad_json_line(tmp_path):
    for text, fragment in (
        ('{"text": "a", "label": 1}\n{oops\n', "line 2 is not valid JSON"),
        ('["a", 1]\n', "line 1 is a JSON list"),
    ):
        with pytest.raises(TextTaskError) as err:
            load_text_file(_write(tmp_path / "b.jsonl", text))
        _one_line_error(err, "b.jsonl", fragment)


def test_no_dev_rows(tmp_path):
    rows = ["text,label"] + [f"review number {i},{i % 2}" for i in range(10)]
    with pytest.raises(TextTaskError) as err:
        load_text_file(_write(tmp_path / "few.csv", "\n".join(rows)))
    _one_line_error(err, "few.csv", "no dev rows", "split_column=")


def test_same_column_twice(tmp_path):
    with pytest.raises(TextTaskError) as err:
        load_text_file(_write(tmp_path / "r.csv", _csv_rows()), "text", "text")
    _one_line_error(err, "same column twice", "'text' by text_column= and label_column=")


# -------------------------------------------------------------------- TFDS


def _mock(num_examples: int = 24):
    import tensorflow_datasets as tfds

    return tfds.testing.mock_data(
        num_examples=num_examples, policy=tfds.testing.MockPolicy.USE_CODE
    )


def test_tfds_sst2(tmp_path):
    with _mock(24):
        task = tt.load_tfds_task("glue/sst2", data_dir=tmp_path)
    assert task.source == "tfds:glue/sst2" and not task.is_pair
    assert task.label_names == ("negative", "positive")
    assert len(task.train_texts) == len(task.dev_texts) == 24
    assert all(isinstance(t, str) for t in task.train_texts)
    assert set(task.train_labels.tolist()) <= {0, 1}


def test_tfds_mnli_pairs_and_matched_dev(tmp_path):
    import tensorflow_datasets as tfds

    with _mock(16), mock.patch.object(tfds, "load", wraps=tfds.load) as load:
        task = tt.load_tfds_task("glue/mnli", data_dir=tmp_path)
    assert [c.kwargs["split"] for c in load.call_args_list] == ["train", "validation_matched"]
    assert {c.kwargs["data_dir"] for c in load.call_args_list} == {str(tmp_path)}
    assert task.is_pair and task.text_columns == ("premise", "hypothesis")
    assert task.label_names == ("entailment", "neutral", "contradiction")
    assert all(isinstance(t, tuple) and len(t) == 2 for t in task.dev_texts)
    assert set(task.dev_labels.tolist()) <= {0, 1, 2}


@pytest.mark.parametrize(
    "name, columns",
    [
        ("glue/qnli", ("question", "sentence")),
        ("glue/rte", ("sentence1", "sentence2")),
        ("glue/mrpc", ("sentence1", "sentence2")),
        ("glue/qqp", ("question1", "question2")),
        ("glue/cola", ("sentence",)),
    ],
)
def test_tfds_text_columns(name, columns, tmp_path):
    with _mock(4):
        task = tt.load_tfds_task(name, data_dir=tmp_path)
    assert task.text_columns == columns
    assert len(task.train_texts) == 4


def test_tfds_unknown_task():
    with pytest.raises(TextTaskError) as err:
        tt.load_tfds_task("glue/stsb")
    _one_line_error(err, "'glue/stsb'", "glue/sst2", "regression")
