"""The fixed train / dev / test split by a hash of the text (one rule for every corpus).

A text's split depends on the SHA-1 of its UTF-8 bytes only: the same on
every machine and Python run, identical texts always in the same split.
Bucket `sha1 % 10` 0 is test, 1 dev and 2-9 train (80/10/10). The built-in
corpora (Rotten Tomatoes, gettext pairs) and labelled files without a split
column (`text_tasks.load_text_file`, whose test bucket joins train) use it.
"""

from __future__ import annotations

import hashlib

TEST_BUCKET = 0
DEV_BUCKET = 1


def split_of(text: str) -> str:
    """ "train", "dev" or "test" by the SHA-1 of `text`: 80% train, 10% dev, 10% test."""
    bucket = int(hashlib.sha1(text.encode("utf-8")).hexdigest(), 16) % 10
    return {TEST_BUCKET: "test", DEV_BUCKET: "dev"}.get(bucket, "train")
