"""Every Colab notebook runs top to bottom in SMOKE mode (CPU, no TPU)."""

import pathlib

import nbformat
import pytest
from nbclient import NotebookClient

COLAB = pathlib.Path(__file__).resolve().parents[1] / "colab"
NOTEBOOKS = sorted(COLAB.glob("*.ipynb"))


def test_there_are_ten_notebooks_with_badge_and_purpose():
    assert [p.stem[:2] for p in NOTEBOOKS] == [f"{i:02d}" for i in range(1, 11)]
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        first = nb.cells[0]
        assert first.cell_type == "markdown"
        assert "colab.research.google.com/github/" in first.source
        assert f"colab/{path.name}" in first.source
        assert len(first.source.split("\n\n")[-1]) > 100  # a purpose paragraph
        params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(params) == 1 and "SMOKE = False" in params[0].source


def test_notebooks_are_built_from_the_generator(tmp_path):
    import shutil
    import subprocess
    import sys

    # The generator writes beside itself: a copy writes into tmp_path, so that colab/
    # is never rewritten while another worker reads a notebook to run it.
    shutil.copy(COLAB / "build_notebooks.py", tmp_path)
    subprocess.run([sys.executable, str(tmp_path / "build_notebooks.py")], check=True)
    built = sorted(tmp_path.glob("*.ipynb"))
    assert [p.name for p in built] == [p.name for p in NOTEBOOKS]
    for path in built:
        assert path.read_text() == (COLAB / path.name).read_text(), (
            f"{path.name} differs from colab/build_notebooks.py"
        )


@pytest.fixture
def run_caches(austen_data_dir, minilm_dir, monkeypatch):
    """The notebooks read the run's copies of the corpora and MiniLM (tests/conftest.py),
    through the variables a user sets for a shared cache: fetched and prepared once per
    run, not again into ~/.cache (which a fresh machine has empty)."""
    monkeypatch.setenv("HEADSIZE_TF_DATA_DIR", str(austen_data_dir))
    monkeypatch.setenv("HEADSIZE_TF_CACHE_DIR", str(minilm_dir.parent))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_in_smoke_mode(path, tmp_path, monkeypatch, run_caches):
    monkeypatch.delenv("TF_DETERMINISTIC_OPS", raising=False)  # As on Colab.
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if "parameters" in cell.metadata.get("tags", []):
            cell.source = "SMOKE = True"
    client = NotebookClient(
        nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # Raises CellExecutionError naming the failing cell.
    errors = [
        o
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]
    assert not errors
