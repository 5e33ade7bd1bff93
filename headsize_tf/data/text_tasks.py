"""Labelled text classification tasks from a CSV / TSV / JSONL file, TFDS GLUE or built-in data.

`load_text_file` reads one text column (or two, for sentence pairs) and a
label column; `load_tfds_task` reads a GLUE task through TensorFlow
Datasets; `rotten_tomatoes_task` is the built-in sentiment data, and
`load_task` picks one of the three (`headsize-tf prune`, either framework).
Each returns a `TextTask` (`data.labelled_text`): train and dev texts, int
labels and the label names, so that predictions can be mapped back to the
labels. Nothing here imports TensorFlow or Keras, except `load_tfds_task`
(TensorFlow Datasets, lazily).

Rules (the same on every machine and Python run):

* Labels are strings or ints; the label map is the sorted unique labels ->
  ids 0..k-1 (numerically sorted if every label is an integer, so labels
  0..k-1 keep their values). A missing label (empty field, JSON null or no
  key) is an error.
* With a split column, its values are `train`, `dev` (or `validation`) and
  `test` (any case); test rows are counted and left out (their labels are
  not read). Without one, a row goes to dev iff the SHA-1 of its text (the
  two texts joined by a tab for pairs) is 1 modulo 10: about 10% dev, the
  same dev rows as the built-in Rotten Tomatoes split, and identical texts
  always land in the same split.
* An empty text is kept: it is a valid input (`[CLS] [SEP]`), as in
  `headsize-tf embed`. A missing one (JSON null or no key, a short CSV row)
  is an error.
* TSV is read without quoting (as GLUE's files are); CSV with the usual
  double-quote quoting. Files are UTF-8 (a byte-order mark is skipped).

Every bad file raises `TextTaskError` (a `ValueError`) with one line naming
the file and the column or value.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import os
import pathlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from headsize_tf.data.labelled_text import Text, TextTask, TextTaskError
from headsize_tf.data.rotten_tomatoes import (
    rotten_tomatoes_splits,  # noqa: F401  (re-exported: the built-in data's texts and labels)
    rotten_tomatoes_task,
)
from headsize_tf.data.splits import DEV_BUCKET, split_of

FORMATS = ("csv", "tsv", "jsonl")
EXTENSIONS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl"}
SPLIT_NAMES = {"train": "train", "dev": "dev", "validation": "dev", "test": "test"}

# GLUE classification tasks in TFDS: (text columns, dev split).
GLUE_TASKS: dict[str, tuple[tuple[str, ...], str]] = {
    "glue/cola": (("sentence",), "validation"),
    "glue/sst2": (("sentence",), "validation"),
    "glue/mrpc": (("sentence1", "sentence2"), "validation"),
    "glue/qqp": (("question1", "question2"), "validation"),
    "glue/mnli": (("premise", "hypothesis"), "validation_matched"),
    "glue/qnli": (("question", "sentence"), "validation"),
    "glue/rte": (("sentence1", "sentence2"), "validation"),
    "glue/wnli": (("sentence1", "sentence2"), "validation"),
}


def label_names_of(labels: Sequence[str]) -> tuple[str, ...]:
    """Sorted unique labels: numerically if all are integers, else as strings."""
    unique = set(labels)
    try:
        return tuple(sorted(unique, key=lambda name: (int(name), name)))
    except ValueError:
        return tuple(sorted(unique))


def file_format(path: str | os.PathLike, data_format: str | None = None) -> str:
    """ "csv", "tsv" or "jsonl": `data_format` if given, else from the extension."""
    if data_format is not None:
        if data_format not in FORMATS:
            raise TextTaskError(f"Unknown data format {data_format!r}; expected one of {FORMATS}.")
        return data_format
    suffix = pathlib.Path(path).suffix.lower()
    if suffix not in EXTENSIONS:
        raise TextTaskError(
            f"Data file {str(path)!r} has an unknown extension {suffix or '(none)'!r}; expected "
            f"{', '.join(EXTENSIONS)} or a data_format= ({', '.join(FORMATS)})."
        )
    return EXTENSIONS[suffix]


def _read_text(path: pathlib.Path) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise TextTaskError(f"Data file {str(path)!r} does not exist.") from None
    except IsADirectoryError:
        raise TextTaskError(f"Data file {str(path)!r} is a directory, not a file.") from None
    bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return data[bom:].decode("utf-8")
    except UnicodeDecodeError as err:
        start = bom + err.start
        line = data[:start].count(b"\n") + 1
        raise TextTaskError(
            f"Data file {str(path)!r} is not UTF-8 (byte 0x{data[start]:02x} on line {line}); "
            "re-save it as UTF-8."
        ) from None


def _missing_column(
    path: pathlib.Path, column: str, argument: str, available: Sequence[str]
) -> TextTaskError:
    return TextTaskError(
        f"Data file {str(path)!r} has no column {column!r} ({argument}); its columns are "
        f"{list(available)}."
    )


def _rows_csv(
    path: pathlib.Path, text: str, delimiter: str, columns: dict[str, str]
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, {column: value}) of a CSV / TSV file after checking its header."""
    quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, quoting=quoting)
    try:
        header = [name.strip() for name in next(reader, [])]
        if not any(header):
            raise TextTaskError(f"Data file {str(path)!r} is empty; expected a header row.")
        for argument, column in columns.items():
            if column not in header:
                raise _missing_column(path, column, argument, header)
        index = {column: header.index(column) for column in columns.values()}
        for fields in reader:
            if not fields:
                continue  # A blank line.
            if len(fields) != len(header):
                raise TextTaskError(
                    f"Data file {str(path)!r} line {reader.line_num} has {len(fields)} fields; "
                    f"its header has {len(header)}."
                )
            yield reader.line_num, {column: fields[i] for column, i in index.items()}
    except csv.Error as err:
        raise TextTaskError(
            f"Data file {str(path)!r} line {reader.line_num} is not valid CSV ({err})."
        ) from None


def _rows_jsonl(
    path: pathlib.Path, text: str, columns: dict[str, str]
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, {column: value}) of a JSON Lines file (one object a line)."""
    records = []
    # Split on "\n" only: JSON strings may hold U+2028 and other line breaks.
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise TextTaskError(
                f"Data file {str(path)!r} line {number} is not valid JSON ({err.msg})."
            ) from None
        if not isinstance(record, dict):
            raise TextTaskError(
                f"Data file {str(path)!r} line {number} is a JSON {type(record).__name__}; "
                "expected one object per line."
            )
        records.append((number, record))
    available = list(dict.fromkeys(key for _, record in records for key in record))
    for argument, column in columns.items():
        if column not in available:
            raise _missing_column(path, column, argument, available)
    for number, record in records:
        yield number, {column: record.get(column) for column in columns.values()}


def _field(path: pathlib.Path, number: int, column: str, value: Any, what: str) -> str:
    if value is None:
        raise TextTaskError(f"Data file {str(path)!r} line {number} has no {what} in {column!r}.")
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return str(value)
    raise TextTaskError(
        f"Data file {str(path)!r} line {number}: {column!r} is a JSON "
        f"{type(value).__name__}; expected a string or a number."
    )


def load_text_file(
    path: str | os.PathLike,
    text_column: str = "text",
    label_column: str = "label",
    *,
    text_pair_column: str | None = None,
    split_column: str | None = None,
    data_format: str | None = None,
) -> TextTask:
    """A labelled text task from a CSV, TSV or JSONL file.

    Args:
      path: The file (UTF-8). CSV and TSV have a header row; JSONL one
        object a line.
      text_column: The column of texts (the first text of a pair).
      label_column: The column of labels (strings or ints).
      text_pair_column: The column of second texts for sentence-pair tasks.
      split_column: A column of `train` / `dev` (or `validation`) / `test`;
        without one, about 10% of rows go to dev by a hash of the text.
      data_format: "csv", "tsv" or "jsonl"; by default from the extension
        (.csv, .tsv, .jsonl, .ndjson).

    Returns:
      The `TextTask` (test rows left out and counted).

    Raises:
      TextTaskError: The file is missing, empty, not UTF-8, of an unknown
        format, lacks a column, has a row without a label, a bad split
        value, only one class, or no train or no dev rows.
    """
    path = pathlib.Path(path)
    fmt = file_format(path, data_format)
    columns = {"text_column=": text_column}
    if text_pair_column is not None:
        columns["text_pair_column="] = text_pair_column
    columns["label_column="] = label_column
    if split_column is not None:
        columns["split_column="] = split_column
    names = list(columns.values())
    twice = next((name for name in names if names.count(name) > 1), None)
    if twice is not None:
        arguments = " and ".join(arg for arg, name in columns.items() if name == twice)
        raise TextTaskError(
            f"The column arguments name the same column twice: {twice!r} by {arguments}."
        )
    text = _read_text(path)
    if not text.strip():
        raise TextTaskError(f"Data file {str(path)!r} is empty.")
    if fmt == "jsonl":
        rows: Iterator[tuple[int, dict[str, Any]]] = _rows_jsonl(path, text, columns)
    else:
        rows = _rows_csv(path, text, "\t" if fmt == "tsv" else ",", columns)

    texts: dict[str, list[Text]] = {"train": [], "dev": []}
    labels: dict[str, list[str]] = {"train": [], "dev": []}
    test_rows = num_rows = 0
    for number, row in rows:
        num_rows += 1
        if split_column is not None:
            value = _field(path, number, split_column, row[split_column], "split")
            split = SPLIT_NAMES.get(value.strip().lower())
            if split is None:
                raise TextTaskError(
                    f"Data file {str(path)!r} line {number}: split {value!r} in {split_column!r} "
                    "is not train, dev, validation or test."
                )
            if split == "test":
                test_rows += 1
                continue
        first = _field(path, number, text_column, row[text_column], "text")
        example: Text = first
        if text_pair_column is not None:
            second = _field(path, number, text_pair_column, row[text_pair_column], "text")
            example = (first, second)
        label = _field(path, number, label_column, row[label_column], "label").strip()
        if not label:
            raise TextTaskError(
                f"Data file {str(path)!r} line {number} has no label in {label_column!r}."
            )
        if split_column is None:
            key = first if text_pair_column is None else "\t".join(example)
            split = "dev" if split_of(key) == "dev" else "train"  # Test rows join train.
        texts[split].append(example)
        labels[split].append(label)

    all_labels = labels["train"] + labels["dev"]
    if not num_rows:
        raise TextTaskError(f"Data file {str(path)!r} has a header but no rows.")
    if not all_labels:
        raise TextTaskError(f"Data file {str(path)!r} has only test rows ({split_column!r}).")
    names_ = label_names_of(all_labels)
    if len(names_) < 2:
        raise TextTaskError(
            f"Data file {str(path)!r} has one class only ({names_[0]!r} in {label_column!r}); "
            "a classifier needs at least two."
        )
    rule = (
        f"column {split_column!r}"
        if split_column is not None
        else f"sha1(text) % 10 == {DEV_BUCKET} -> dev"
    )
    for split in ("train", "dev"):
        if not texts[split]:
            hint = "" if split_column is not None else " (add rows, or a split_column=)"
            raise TextTaskError(
                f"Data file {str(path)!r} has no {split} rows by the split {rule}{hint}."
            )
    if len(set(labels["train"])) < 2:
        raise TextTaskError(
            f"Data file {str(path)!r}: the train rows have one class only "
            f"({labels['train'][0]!r} in {label_column!r}); a classifier needs at least two."
        )
    ids = {name: i for i, name in enumerate(names_)}
    return TextTask(
        source=str(path),
        text_columns=tuple(names[: 2 if text_pair_column is not None else 1]),
        label_names=names_,
        train_texts=texts["train"],
        train_labels=np.asarray([ids[x] for x in labels["train"]], np.int32),
        dev_texts=texts["dev"],
        dev_labels=np.asarray([ids[x] for x in labels["dev"]], np.int32),
        split_rule=rule,
        test_rows=test_rows,
    )


def load_tfds_task(name: str, data_dir: str | os.PathLike | None = None) -> TextTask:
    """A GLUE classification task from TensorFlow Datasets (`glue/sst2`, `glue/mnli`, ...).

    The train split and the dev split (`validation`; `validation_matched`
    for MNLI) are read; labels keep TFDS' ids and names.

    Args:
      name: A key of `GLUE_TASKS` (`glue/NAME`).
      data_dir: TFDS data directory (default: TFDS' own).

    Returns:
      The `TextTask`.

    Raises:
      TextTaskError: Unknown task name.
    """
    if name not in GLUE_TASKS:
        raise TextTaskError(
            f"Unknown TFDS task {name!r}; expected one of {sorted(GLUE_TASKS)} "
            "(glue/stsb is a regression task)."
        )
    import tensorflow_datasets as tfds

    columns, dev_split = GLUE_TASKS[name]
    data_dir = None if data_dir is None else str(data_dir)
    out: dict[str, tuple[list[Text], np.ndarray]] = {}
    label_names: tuple[str, ...] = ()
    for split, tfds_split in (("train", "train"), ("dev", dev_split)):
        dataset, info = tfds.load(name, split=tfds_split, data_dir=data_dir, with_info=True)
        label_names = tuple(info.features["label"].names)
        texts: list[Text] = []
        labels: list[int] = []
        for example in tfds.as_numpy(dataset):
            fields = [example[c].decode("utf-8") for c in columns]
            texts.append(fields[0] if len(fields) == 1 else (fields[0], fields[1]))
            labels.append(int(example["label"]))
        if not texts:
            raise TextTaskError(f"TFDS task {name!r} has an empty {tfds_split!r} split.")
        out[split] = (texts, np.asarray(labels, np.int32))
    return TextTask(
        source=f"tfds:{name}",
        text_columns=columns,
        label_names=label_names,
        train_texts=out["train"][0],
        train_labels=out["train"][1],
        dev_texts=out["dev"][0],
        dev_labels=out["dev"][1],
        split_rule=f"tfds train / {dev_split}",
    )


# Built-in tasks: {task: its built-in data}.
TASKS = {"sentiment": ("rotten_tomatoes",)}


def load_task(
    *,
    task: str | None = None,
    data: str | None = None,
    data_dir: str | os.PathLike | None = None,
    data_file: str | os.PathLike | None = None,
    data_format: str | None = None,
    text_column: str | None = None,
    text_pair_column: str | None = None,
    label_column: str | None = None,
    split_column: str | None = None,
    tfds: str | None = None,
) -> TextTask:
    """The labelled task `prune` works on: built-in, a data file, or TFDS GLUE.

    Args:
      task: Built-in task ("sentiment", the default when no other source).
      data: Built-in data of `task` ("rotten_tomatoes").
      data_dir: Where the built-in data or TFDS data are cached.
      data_file: A CSV / TSV / JSONL file (see `load_text_file`).
      data_format: "csv", "tsv" or "jsonl" (default: from the extension).
      text_column: Text column of `data_file` (default "text").
      text_pair_column: Second text column of `data_file` (sentence pairs).
      label_column: Label column of `data_file` (default "label").
      split_column: Split column of `data_file` (default: a hash split).
      tfds: A TFDS GLUE task, e.g. "glue/sst2" or "glue/mnli".

    Raises:
      TextTaskError: Conflicting sources, options for another source, or bad data.
    """
    file_options = {
        "data_format=": data_format,
        "text_column=": text_column,
        "text_pair_column=": text_pair_column,
        "label_column=": label_column,
        "split_column=": split_column,
    }
    sources = [arg for arg, v in (("data_file=", data_file), ("tfds=", tfds)) if v is not None]
    builtin = [arg for arg, v in (("task=", task), ("data=", data)) if v is not None]
    if len(sources) > 1 or (sources and builtin):
        raise TextTaskError(f"Pass one data source; got {' and '.join(builtin + sources)}.")
    if data_file is None:
        extra = [arg for arg, value in file_options.items() if value is not None]
        if extra:
            raise TextTaskError(f"{', '.join(extra)} only apply to data_file=.")
    if data_file is not None:
        return load_text_file(
            data_file,
            text_column or "text",
            label_column or "label",
            text_pair_column=text_pair_column,
            split_column=split_column,
            data_format=data_format,
        )
    if tfds is not None:
        return load_tfds_task(tfds, data_dir)
    task, data = task or "sentiment", data or "rotten_tomatoes"
    if task not in TASKS or data not in TASKS[task]:
        raise ValueError(
            f"Unknown task/data {task!r}/{data!r}; expected one of "
            f"{[f'{t}/{d}' for t, ds in TASKS.items() for d in ds]}."
        )
    return rotten_tomatoes_task(data_dir)
