"""SQuAD for `headsize_bert/span_labeling` (`headsize-tf data squad`).

Model Garden's `QuestionAnsweringTask` trains on TFRecords of windowed
features and evaluates on the raw SQuAD JSON (it windows the dev set itself
and scores exact match / F1 with the official script). This module writes
both into `DATA_DIR/squad/`:

* `train-v1.1.json`, `dev-v1.1.json`: SQuAD-format JSON, from TFDS
  `squad/v1.1` (networked machines) or copied from local files;
* `train.tf_record`: the training features (`squad_lib`, WordPiece);
* `meta.json`: feature counts and the settings used;
* `vocab.txt`: the vocabulary the features were made with (the dev set is
  windowed with it at evaluation time).

Everything is written into a temporary directory renamed into place, so an
interrupted run leaves no half-written directory.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import tempfile
from collections.abc import Iterable

SPLITS = {"train": "train-v1.1.json", "dev": "dev-v1.1.json"}


class SquadError(ValueError):
    """Bad SQuAD input."""


def squad_json(examples: Iterable[dict]) -> dict:
    """SQuAD v1.1 JSON from flat examples (id, title, context, question, answers).

    `answers` is {"text": [...], "answer_start": [...]} as in TFDS. Examples
    sharing a title and context become one paragraph, in first-seen order.
    """
    articles: dict[str, dict[str, list]] = {}
    for ex in examples:
        answers = ex["answers"]
        if len(answers["text"]) != len(answers["answer_start"]):
            raise SquadError(
                f"Example {ex['id']!r}: answers text and answer_start differ in length."
            )
        paragraphs = articles.setdefault(ex["title"], {})
        paragraphs.setdefault(ex["context"], []).append(
            {
                "id": ex["id"],
                "question": ex["question"],
                "answers": [
                    {"text": t, "answer_start": int(s)}
                    for t, s in zip(answers["text"], answers["answer_start"], strict=True)
                ],
            }
        )
    data = [
        {"title": title, "paragraphs": [{"context": c, "qas": q} for c, q in paragraphs.items()]}
        for title, paragraphs in articles.items()
    ]
    return {"version": "1.1", "data": data}


def tfds_examples(split: str, name: str = "squad/v1.1", max_examples: int | None = None):
    """Flat examples of a TFDS SQuAD split, as Python strings."""
    import tensorflow_datasets as tfds

    dataset = tfds.load(name, split=split, shuffle_files=False)
    if max_examples is not None:
        dataset = dataset.take(max_examples)
    for ex in dataset.as_numpy_iterator():
        yield {
            "id": ex["id"].decode(),
            "title": ex["title"].decode(),
            "context": ex["context"].decode(),
            "question": ex["question"].decode(),
            "answers": {
                "text": [t.decode() for t in ex["answers"]["text"]],
                "answer_start": [int(s) for s in ex["answers"]["answer_start"]],
            },
        }


def prepare(
    out_dir: str | os.PathLike,
    vocab_file: str,
    train_json: str | None = None,
    dev_json: str | None = None,
    tfds_name: str = "squad/v1.1",
    max_examples: int | None = None,
    max_seq_length: int = 384,
    doc_stride: int = 128,
    max_query_length: int = 64,
    do_lower_case: bool = True,
    overwrite: bool = False,
) -> pathlib.Path:
    """Writes `out_dir` (JSON + training TFRecord + meta.json) atomically.

    Without `train_json` / `dev_json` the examples come from TFDS `tfds_name`.
    """
    from official.nlp.data import squad_lib

    out = pathlib.Path(out_dir)
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} exists; pass overwrite=True to rebuild it.")
    if not os.path.isfile(vocab_file):
        raise SquadError(f"vocab_file {vocab_file!r} does not exist.")
    if (train_json is None) != (dev_json is None):
        raise SquadError("Give both train_json and dev_json, or neither (TFDS).")
    for path in (train_json, dev_json):
        if path is not None and not os.path.isfile(path):
            raise SquadError(f"SQuAD JSON file {path!r} does not exist.")
    if max_seq_length < 5:
        raise SquadError(
            f"A sequence length of {max_seq_length} cannot hold a question token, a document "
            "token and 3 special tokens; expected at least 5."
        )
    # squad_lib's windows hold the question and 3 special tokens; with no room left for the
    # document they would never advance. Longer questions are cut to leave one token.
    max_query_length = min(max_query_length, max_seq_length - 4)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        sources = {"train": train_json, "dev": dev_json}
        for split, filename in SPLITS.items():
            if sources[split] is not None:
                shutil.copyfile(sources[split], tmp / filename)
            else:
                tfds_split = "train" if split == "train" else "validation"
                data = squad_json(tfds_examples(tfds_split, tfds_name, max_examples))
                (tmp / filename).write_text(json.dumps(data))
        meta = squad_lib.generate_tf_record_from_json_file(
            str(tmp / SPLITS["train"]),
            vocab_file,
            str(tmp / "train.tf_record"),
            max_seq_length=max_seq_length,
            do_lower_case=do_lower_case,
            max_query_length=max_query_length,
            doc_stride=doc_stride,
        )
        if not meta["train_data_size"]:
            raise SquadError(
                f"No training feature was written: no answer of {sources['train'] or tfds_name} "
                "was found at its answer_start in the context."
            )
        shutil.copyfile(vocab_file, tmp / "vocab.txt")
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
