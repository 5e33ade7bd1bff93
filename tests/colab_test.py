"""Every Colab notebook runs top to bottom in SMOKE mode (CPU, no TPU)."""

import pathlib

import nbformat
import pytest
from nbclient import NotebookClient

COLAB = pathlib.Path(__file__).resolve().parents[1] / "colab"
NOTEBOOKS = sorted(COLAB.glob("*.ipynb"))


def test_there_are_eleven_notebooks_with_badge_and_purpose():
    assert [p.stem[:2] for p in NOTEBOOKS] == [f"{i:02d}" for i in range(1, 12)]
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


def _backend(nb) -> str:
    """The notebook's Keras world: its setup cell (the one after the parameters) says."""
    return "jax" if 'KERAS_BACKEND", "jax"' in nb.cells[2].source else "tf_keras"


def _test_id(path: pathlib.Path) -> str:
    # "jax-07_keras3_jax": tests/conftest.py schedules each world's notebooks as one unit
    # on one worker, so that they share that worker's kernel.
    return f"{_backend(nbformat.read(path, as_version=4))}-{path.stem}"


class _Kernels:
    """One kernel per Keras world, shared by that world's notebooks in this module.

    Starting a kernel and importing TensorFlow, Keras and the library cost each
    notebook 7-10 CPU-seconds; the eleven notebooks start two kernels. Each
    notebook still runs as in a fresh runtime: a first cell (not the notebook's)
    clears the kernel's namespace with `%reset -f`, so a name that only an earlier
    notebook defined or imported raises NameError, and changes into the test's
    own folder. The JAX notebooks get their own kernel (Keras reads its backend
    once, at import). A notebook that fails takes its kernel down with it: the
    next one starts a fresh kernel.
    """

    def __init__(self):
        self.owners: dict[str, NotebookClient] = {}

    def execute(self, nb, cwd) -> None:
        backend = _backend(nb)
        fresh = nbformat.v4.new_code_cell(f"%reset -f\nimport os\nos.chdir({str(cwd)!r})")
        nb.cells.insert(0, fresh)
        owner = self.owners.get(backend)
        if owner is None:
            client = NotebookClient(
                nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}
            )
        else:
            client = NotebookClient(nb, km=owner.km, timeout=900, kernel_name="python3")
        try:
            client.execute(cleanup_kc=False)  # Raises CellExecutionError naming the cell.
        except BaseException:
            (owner or client)._cleanup_kernel()  # Shuts the kernel down.
            self.owners.pop(backend, None)
            raise
        finally:
            if owner is not None and client.kc is not None:
                client.kc.stop_channels()  # This notebook's connection, not the kernel.
        if owner is None:
            self.owners[backend] = client

    def close(self) -> None:
        while self.owners:
            self.owners.popitem()[1]._cleanup_kernel()


@pytest.fixture(scope="module")
def kernels():
    shared = _Kernels()
    yield shared
    shared.close()


# The default run takes the tf_keras quickstart notebook; the full run (docs/testing.md) all
# eleven, the JAX world's included.
DEFAULT_RUN = ("01_",)


def _param(path: pathlib.Path):
    slow = () if path.name.startswith(DEFAULT_RUN) else (pytest.mark.slow,)
    return pytest.param(path, marks=slow, id=_test_id(path))


@pytest.mark.parametrize("path", [_param(p) for p in NOTEBOOKS])
def test_notebook_runs_in_smoke_mode(path, tmp_path, monkeypatch, run_caches, kernels):
    # As on Colab. A kernel keeps the environment it started with: every test sets the same.
    monkeypatch.delenv("TF_DETERMINISTIC_OPS", raising=False)
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if "parameters" in cell.metadata.get("tags", []):
            cell.source = "SMOKE = True"
    kernels.execute(nb, tmp_path)
    errors = [
        o
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]
    assert not errors
