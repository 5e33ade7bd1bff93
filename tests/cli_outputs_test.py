"""Outputs of `embed`, `analyze spectrum`, `export`, `compress` and `data`: checked first.

An output that exists (without `--overwrite`), is a symbolic link, lies below a
file, or overlaps the model read is refused in one line before any work; so
are flags that the named model or mode would ignore, and a `data prepare` that
would replace a corpus prepared with other options. The commands run in
process (`headsize_tf.cli.main`); where a refusal is tested, the command's
runner is a stand-in that fails the test if reached, so that nothing slow runs.
"""

import dataclasses
import hashlib
import json
import os
import pathlib

import numpy as np
import pytest

from headsize_tf import cli
from headsize_tf.cli import compress, embed, export
from headsize_tf.data import corpora

NOPE = "/nonexistent/headsize_tf_model"


def _unreached(args):
    raise AssertionError("the command's work ran before its outputs were checked")


def _run(argv: list[str], capsys) -> tuple[int, list[str], str]:
    """Exit status, the lines on stderr and stdout of `headsize-tf ARGV`, in process."""
    capsys.readouterr()
    try:
        code = cli.main(argv)
    except SystemExit as stop:  # argparse's own checks (types, choices).
        code = stop.code
    captured = capsys.readouterr()
    return code, [line for line in captured.err.splitlines() if line.strip()], captured.out


def _refused(argv: list[str], fragment: str, capsys) -> str:
    code, lines, _ = _run(argv, capsys)
    assert code == 2, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith("headsize-tf ") and "error:" in lines[0], lines[0]
    assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def _tree(root: pathlib.Path) -> dict[str, bytes]:
    """Every file under `root` (links as their targets' names) with its bytes."""
    return {
        str(p.relative_to(root)): (os.readlink(p).encode() if p.is_symlink() else p.read_bytes())
        for p in sorted(root.rglob("*"))
        if p.is_file() or p.is_symlink()
    }


@pytest.fixture
def root(tmp_path) -> pathlib.Path:
    (tmp_path / "sentences.txt").write_text("a fine film\na dull film\n")
    (tmp_path / "old.npy").write_bytes(b"old vectors")
    (tmp_path / "link.npy").symlink_to(tmp_path / "old.npy")
    (tmp_path / "a_file").write_text("a file")
    (tmp_path / "plot.png").write_bytes(b"old plot")
    (tmp_path / "data_only.json").write_text("{}")
    (tmp_path / "folder.npy").mkdir()
    existing = tmp_path / "existing_dir"
    (existing / "1").mkdir(parents=True)  # An export version that exists.
    (existing / "keep.txt").write_text("keep")
    lm = tmp_path / "lm_model_dir"  # As `train` marks a causal LM's model_dir.
    lm.mkdir()
    (lm / "headsize_experiment.json").write_text('{"experiment": "headsize_lm/language_modeling"}')
    (tmp_path / "decoder.gguf").write_bytes(b"GGUF")
    return tmp_path


# --------------------------------------------------------------------- embed
EMBED = ["embed", "--model", "minilm-l6", "--input", "{root}/sentences.txt"]


@pytest.mark.parametrize(
    "output, extra, fragment",
    [
        ("old.npy", [], "Output file {root}/old.npy exists; pass --overwrite to replace it."),
        ("old", [], "Output file {root}/old.npy exists; pass --overwrite"),  # .npy is added
        ("link.npy", ["--overwrite"], "link.npy is a symbolic link"),
        ("a_file/vectors.npy", [], "cannot be created: {root}/a_file is a file"),
        ("folder.npy", ["--overwrite"], "folder.npy is a directory; expected a file"),
    ],
)
def test_embed_checks_its_output_first(root, monkeypatch, capsys, output, extra, fragment):
    monkeypatch.setitem(embed.RUNNERS, "pretrained/tf_keras", _unreached)
    before = _tree(root)
    argv = [a.format(root=root) for a in EMBED] + ["--output", f"{root}/{output}", *extra]
    _refused(argv, fragment.format(root=root), capsys)
    assert _tree(root) == before


def test_embed_refuses_its_input_as_output(root, monkeypatch, capsys):
    monkeypatch.setitem(embed.RUNNERS, "pretrained/tf_keras", _unreached)
    (root / "in.npy").write_text("a fine film\n")
    argv = [*EMBED[:-1], f"{root}/in.npy", "--output", f"{root}/in.npy", "--overwrite"]
    _refused(argv, "is the --input file", capsys)
    assert (root / "in.npy").read_text() == "a fine film\n"


class _Encoder:
    def embed(self, sentences, batch_size=32, progress=False):
        return np.ones([len(sentences), 3], np.float32)


def test_embed_overwrite_replaces_the_output(root, monkeypatch, capsys):
    monkeypatch.setitem(embed.RUNNERS, "pretrained/tf_keras", lambda args: _Encoder())
    argv = [a.format(root=root) for a in EMBED] + ["--output", f"{root}/old.npy", "--overwrite"]
    code, lines, out = _run(argv, capsys)
    assert code == 0, lines
    np.testing.assert_array_equal(np.load(root / "old.npy"), np.ones([2, 3], np.float32))
    assert "2 x 3 float32" in out
    assert sorted(p.name for p in root.iterdir() if p.name.startswith(".")) == []


# ----------------------------------------------------------- analyze spectrum
@pytest.mark.parametrize(
    "output, extra, fragment",
    [
        ("plot.png", [], "Output file {root}/plot.png exists; pass --overwrite to replace it."),
        ("data_only.png", [], "Output file {root}/data_only.json exists; pass --overwrite"),
        ("new.json", [], "ends in .json, the suffix of the data written beside the plot"),
        ("link.npy", ["--overwrite"], "link.npy is a symbolic link"),
        ("a_file/plot.png", [], "cannot be created: {root}/a_file is a file"),
        ("existing_dir", ["--overwrite"], "existing_dir is a directory; expected a file"),
    ],
)
def test_spectrum_checks_its_outputs_before_loading(root, capsys, output, extra, fragment):
    before = _tree(root)
    argv = ["analyze", "spectrum", "--checkpoint", NOPE, "--output", f"{root}/{output}", *extra]
    _refused(argv, fragment.format(root=root), capsys)
    assert _tree(root) == before


# -------------------------------------------------------------------- export
@pytest.mark.parametrize(
    "output, fragment",
    [
        ("lm_model_dir", "is the model it reads (--model-dir {root}/lm_model_dir)"),
    ],
)
def test_export_output_apart_from_the_model_dir(root, monkeypatch, capsys, output, fragment):
    monkeypatch.setitem(export.RUNNERS, "model_dir", _unreached)
    before = _tree(root)
    argv = ["export", "--model-dir", f"{root}/lm_model_dir", "--task", "lm"]
    _refused([*argv, "--output", f"{root}/{output}"], fragment.format(root=root), capsys)
    assert _tree(root) == before
    assert not (root / "lm_model_dir" / "1").exists()


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (
            ["--decoder", "{root}/decoder.gguf", "--task", "lm", "--format", "gguf"]
            + ["--version", "2"],
            "--version 2 numbers a SavedModel export (--format savedmodel)",
        ),
        (
            ["--decoder", "{root}/decoder.gguf", "--task", "lm", "--format", "hf"]
            + ["--vocab-file", "{root}/a_file"],
            "--vocab-file is not for a --decoder",
        ),
        (
            ["--model", "minilm-l6", "--task", "embedding", "--vocab-file", "{root}/a_file"],
            "--vocab-file is for a --model-dir (or a --model-file CausalLM)",
        ),
        (
            ["--checkpoint", "{root}/existing_dir", "--task", "embedding"]
            + ["--vocab-file", "{root}/a_file"],
            "a pretrained encoder or --checkpoint brings its own",
        ),
    ],
)
def test_export_flags_that_do_not_apply(root, monkeypatch, capsys, argv, fragment):
    for key in export.RUNNERS:
        monkeypatch.setitem(export.RUNNERS, key, _unreached)
    before = _tree(root)
    argv = ["export", *[a.format(root=root) for a in argv]]
    _refused([*argv, "--output", f"{root}/out"], fragment, capsys)
    assert _tree(root) == before


def test_export_checks_the_version_first_and_overwrite_passes(root, monkeypatch, capsys):
    calls = []
    monkeypatch.setitem(export.RUNNERS, "model_dir", lambda args: calls.append(args) or ("p", "s"))
    argv = ["export", "--model-dir", f"{root}/lm_model_dir", "--task", "lm"]
    argv += ["--output", f"{root}/existing_dir"]
    _refused(argv, "existing_dir/1 exists; pass --overwrite", capsys)
    assert calls == []
    code, lines, _ = _run([*argv, "--overwrite"], capsys)
    assert code == 0, lines
    assert [c.written_output for c in calls] == [f"{root}/existing_dir/1"]


# ------------------------------------------------------------------ compress
COMPRESS = ["compress", "--model", "minilm-l6", "--shared-key-dim", "8"]


@pytest.mark.parametrize(
    "output, extra, fragment",
    [
        ("a_file", ["--overwrite"], "Output {root}/a_file is a file; expected a directory"),
        ("a_file/out", [], "cannot be created: {root}/a_file is a file"),
        ("existing_dir", [], "existing_dir exists; pass --overwrite to replace it."),
        ("link.npy", ["--overwrite"], "link.npy is a symbolic link"),
    ],
)
def test_compress_checks_its_output_before_the_decomposition(
    root, monkeypatch, capsys, output, extra, fragment
):
    monkeypatch.setitem(compress.RUNNERS, "pretrained/tf_keras", _unreached)
    before = _tree(root)
    _refused(
        [*COMPRESS, "--output", f"{root}/{output}", *extra], fragment.format(root=root), capsys
    )
    assert _tree(root) == before


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-0.5", "abc"])
def test_compress_tolerance_is_a_finite_number_at_least_zero(root, capsys, value):
    argv = [*COMPRESS, "--output", f"{root}/out", f"--tolerance={value}"]
    _refused(argv, f"argument --tolerance: expected a finite number >= 0, got '{value}'", capsys)
    assert not (root / "out").exists()


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (
            [*COMPRESS, "--method", "tensorly", "--max-iter", "5"],
            "--max-iter 5 caps the sweeps of --method als; --method tensorly runs",
        ),
        (
            ["compress", "--model-dir", "{root}/lm_model_dir", "--shared-key-dim", "8"]
            + ["--eval-limit", "5"],
            "--eval-limit 5 counts an encoder's eval sentences; a --model-dir is evaluated",
        ),
    ],
)
def test_compress_flags_that_do_not_apply(root, monkeypatch, capsys, argv, fragment):
    for key in compress.RUNNERS:
        monkeypatch.setitem(compress.RUNNERS, key, _unreached)
    argv = [a.format(root=root) for a in argv] + ["--output", f"{root}/out"]
    _refused(argv, fragment, capsys)
    assert not (root / "out").exists()


def test_compress_overwrite_reaches_the_work_with_defaults(root, monkeypatch, capsys):
    seen = []

    def runner(args):
        seen.append((args.max_iter, args.eval_limit, args.tolerance))
        return {"layers": [], "params_before": 2, "params_after": 1}

    monkeypatch.setitem(compress.RUNNERS, "pretrained/tf_keras", runner)
    argv = [*COMPRESS, "--output", f"{root}/existing_dir", "--overwrite", "--tolerance", "0"]
    code, lines, out = _run(argv, capsys)
    assert code == 0, lines
    assert seen == [(compress.MAX_ITER, compress.EVAL_LIMIT, 0.0)]
    assert "params: 2 -> 1" in out


# ---------------------------------------------------------------------- data
def _prepared(data_dir: pathlib.Path, name: str, **options) -> pathlib.Path:
    """A prepared-looking corpus: one file and a MANIFEST.json that lists it."""
    corpus = data_dir / name
    corpus.mkdir(parents=True)
    (corpus / "vocab.txt").write_text("[PAD]\n[UNK]\n")
    data = (corpus / "vocab.txt").read_bytes()
    manifest = {
        "name": name,
        "source": "test",
        "options": dataclasses.asdict(corpora.PrepareOptions(**options)),
        "stats": {"vocab_size": 2},
        "files": {"vocab.txt": {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}},
    }
    (corpus / "MANIFEST.json").write_text(json.dumps(manifest))
    return corpus


def _not_prepared(*args, **kwargs):
    raise AssertionError("the corpus was prepared again")


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (
            ["--vocab-size", "4096"],
            "was prepared with --vocab-size 1000, not --vocab-size 4096; models trained on it",
        ),
        (
            ["--vocab-size", "1000", "--sequence-length", "64"],
            "was prepared with --sequence-length 128, not --sequence-length 64",
        ),
    ],
)
def test_prepare_refuses_a_corpus_of_other_options(tmp_path, monkeypatch, capsys, extra, fragment):
    monkeypatch.setattr(corpora, "prepare", _not_prepared)
    _prepared(tmp_path, "austen", vocab_size=1000)
    before = _tree(tmp_path)
    line = _refused(
        ["data", "prepare", "austen", "--data-dir", str(tmp_path), *extra], fragment, capsys
    )
    assert "--overwrite replaces it" in line
    assert _tree(tmp_path) == before


def test_prepare_rerun_with_its_options_is_a_no_op(tmp_path, capsys):
    corpus = _prepared(tmp_path, "austen", vocab_size=1000, seq_length=64)
    before = _tree(tmp_path)
    argv = ["data", "prepare", "austen", "--data-dir", str(tmp_path), "--vocab-size", "1000"]
    code, lines, out = _run([*argv, "--sequence-length", "64"], capsys)
    assert code == 0, lines
    assert f"prepared austen in {corpus}" in out
    assert _tree(tmp_path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["austen"]


def test_prepare_overwrite_replaces_a_corpus_of_other_options(tmp_path, monkeypatch, capsys):
    corpus = _prepared(tmp_path, "austen", vocab_size=1000)
    calls = []

    def prepare(name, data_dir, options, overwrite=False):
        calls.append((name, options.vocab_size, overwrite))
        return corpus

    monkeypatch.setattr(corpora, "prepare", prepare)
    argv = ["data", "prepare", "austen", "--data-dir", str(tmp_path), "--overwrite"]
    code, lines, _ = _run(argv, capsys)
    assert code == 0, lines
    assert calls == [("austen", 4096, True)]


def test_prepare_of_the_library_refuses_other_options(tmp_path):
    _prepared(tmp_path, "austen", vocab_size=1000)
    before = _tree(tmp_path)
    options = corpora.PrepareOptions(vocab_size=200)
    with pytest.raises(
        corpora.CorpusError,
        match=r"prepared with other options: vocab_size 1000 \(asked: 200\).*"
        r"`headsize-tf data prepare austen --overwrite`",
    ):
        corpora.prepare("austen", tmp_path, options, raw={})
    assert _tree(tmp_path) == before


def test_options_a_corpus_does_not_use_are_no_change(tmp_path):
    corpus = _prepared(tmp_path, "gettext_de", seq_length=64)
    assert corpora.option_changes("gettext_de", tmp_path) == {}
    assert corpora.prepare("gettext_de", tmp_path, raw=[]) == corpus
    assert corpora.option_changes("austen", tmp_path) == {}  # Not prepared there.
    assert corpora.option_changes("gettext_de", tmp_path, corpora.PrepareOptions(vocab_size=9)) == {
        "vocab_size": (4096, 9)
    }


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (
            ["data", "prepare", "gettext_de", "--sequence-length", "64"],
            "--sequence-length 64 sizes the training windows of austen and rotten_tomatoes; "
            "gettext_de has none",
        ),
        (
            ["data", "vocab", "--text", "{root}/sentences.txt", "--split", "test"],
            "--split is for --tfds; --text reads every line",
        ),
        (
            ["data", "vocab", "--text", "{root}/sentences.txt", "--features", "en", "de"],
            "--features is for --tfds",
        ),
        (
            ["data", "vocab", "--text", "{root}/sentences.txt", "--max-examples", "10"],
            "--max-examples is for --tfds",
        ),
        (
            ["data", "squad", "--vocab-file", "{root}/a_file", "--train-json", "{root}/a_file"]
            + ["--dev-json", "{root}/a_file", "--tfds", "squad/v2.0"],
            "--tfds is for the TFDS examples; --train-json and --dev-json are read whole",
        ),
        (
            ["data", "squad", "--vocab-file", "{root}/a_file", "--train-json", "{root}/a_file"]
            + ["--dev-json", "{root}/a_file", "--max-examples", "10"],
            "--max-examples is for the TFDS examples",
        ),
    ],
)
def test_data_flags_that_do_not_apply(root, capsys, argv, fragment):
    before = _tree(root)
    argv = [a.format(root=root) for a in argv]
    where = ["--output", f"{root}/vocab.txt"] if argv[1] == "vocab" else ["--data-dir", f"{root}/d"]
    _refused([*argv, *where], fragment, capsys)
    assert _tree(root) == before
