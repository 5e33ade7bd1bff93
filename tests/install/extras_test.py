"""The install's extras (setup.cfg): a base install for the Keras 3 front, one extra per use.

Checked on the metadata (no install): the base requirements hold no TensorFlow and cover
every third-party package that the Keras 3 front, the core and the data floor import,
except the optional ones (`headsize_tf.core.extras.EXTRAS`), each of which its extra
installs; `all` is every extra, `test` is `all` plus the test tools and installs every
package `.ci/run` imports; the pins are the same wherever a package is listed; and
docs/install.md lists every extra. That the base install runs the Keras 3 front:
tests/keras3/no_tensorflow_test.py (every other extra made unimportable).
"""

from __future__ import annotations

import ast
import configparser
import pathlib
import re
import sys

import pytest

from headsize_tf.core import extras

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXTRAS_OF_USE = ("tf", "garden", "jax", "hub", "tune", "cp", "gguf")
# Import name -> distribution, where they differ (the optional ones: extras.PACKAGES).
DISTRIBUTIONS = {"yaml": "pyyaml", **extras.PACKAGES}
# .ci/run checks that `pip install -e ".[test]"` gave these.
CI_IMPORTS = (
    "tensorflow",
    "tf_keras",
    "keras",
    "jax",
    "official",
    "tensorly",
    "keras_tuner",
    "tensorflow_text",
    "keras_hub",
    "hypothesis",
)
NO_TENSORFLOW = {
    "tensorflow",
    "tf-keras",
    "tensorflow-text",
    "tf-models-official",
    "tensorflow-datasets",
    "keras-tuner",
    "tensorly",
    "keras-hub",
    "jax",
    "gguf",
}


def _requirements(value: str) -> list[str]:
    return [line.strip() for line in value.splitlines() if line.strip()]


def _name(requirement: str) -> str:
    return re.split(r"[<>=~!\[; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


@pytest.fixture(scope="module")
def setup_cfg():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg", encoding="utf-8")
    base = _requirements(config["options"]["install_requires"])
    extra = {name: _requirements(v) for name, v in config["options.extras_require"].items()}
    return base, extra


def test_the_extras_are_the_documented_ones(setup_cfg):
    _, extra = setup_cfg
    assert set(extra) == {*EXTRAS_OF_USE, "all", "test"}
    assert set(extras.EXTRAS.values()) <= set(EXTRAS_OF_USE)


def test_the_base_install_has_no_tensorflow(setup_cfg):
    base, _ = setup_cfg
    names = {_name(r) for r in base}
    assert not names & NO_TENSORFLOW, names & NO_TENSORFLOW
    assert {"keras", "numpy", "tokenizers"} <= names


def test_all_is_every_extra_and_test_installs_all_and_what_ci_imports(setup_cfg):
    _, extra = setup_cfg
    every = {r for name in EXTRAS_OF_USE for r in extra[name]}
    assert set(extra["all"]) == every
    assert set(extra["all"]) <= set(extra["test"])
    test_names = {_name(r) for r in extra["test"]}
    for module in CI_IMPORTS:
        if module != "keras":  # keras is in the base install.
            assert DISTRIBUTIONS.get(module, module).replace("_", "-") in test_names, module


def test_a_package_has_one_pin_wherever_it_is_listed(setup_cfg):
    base, extra = setup_cfg
    pins: dict[str, set[str]] = {}
    for requirement in [*base, *(r for rs in extra.values() for r in rs)]:
        pins.setdefault(_name(requirement), set()).add(requirement)
    assert {name: p for name, p in pins.items() if len(p) > 1} == {}
    # The pins the full install has had since the split into extras.
    for pin in (
        "tensorflow~=2.20.0",
        "tf-keras~=2.20.0",
        "tensorflow-text~=2.20.0",
        "tf-models-official==2.20.0",
        "keras-tuner~=1.4.7",
        "tensorly~=0.10.0",
        "keras-hub>=0.32.0,<0.33",
        "kaggle>=1.7,<2.2.2",
    ):
        assert pins[_name(pin)] == {pin}


def test_each_optional_module_is_installed_by_its_extra(setup_cfg):
    _, extra = setup_cfg
    for module, name in extras.EXTRAS.items():
        distribution = DISTRIBUTIONS.get(module, module).replace("_", "-")
        assert distribution in {_name(r) for r in extra[name]}, (module, name)


def _third_party_imports(folder: pathlib.Path) -> dict[str, str]:
    """Top-level module -> a file importing it (absolute imports, anywhere in the file)."""
    found: dict[str, str] = {}
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ("headsize_tf", "__future__"):
                    found.setdefault(top, str(path.relative_to(ROOT)))
    return found


def test_the_base_install_covers_what_the_keras3_front_core_and_data_import(setup_cfg):
    base, _ = setup_cfg
    names = {_name(r) for r in base}
    missing = {}
    for folder in ("keras3", "core", "data"):
        for module, path in _third_party_imports(ROOT / "headsize_tf" / folder).items():
            optional = module in extras.EXTRAS
            if not optional and DISTRIBUTIONS.get(module, module) not in names:
                missing[module] = path
    assert missing == {}, "add them to install_requires, or to an extra (core.extras.EXTRAS)"


def test_require_names_the_extra_in_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorly", None)
    with pytest.raises(extras.MissingExtraError) as caught:
        extras.require("tensorly", purpose="CP by tensorly")
    assert str(caught.value) == (
        "tensorly is not installed (needed for CP by tensorly); install the extra: "
        'pip install "headsize-tf[cp]"'
    )
    assert isinstance(caught.value, ImportError) and isinstance(caught.value, RuntimeError)
    assert not extras.available("tensorly")
    monkeypatch.setitem(sys.modules, "tensorflow_text", None)
    with pytest.raises(extras.MissingExtraError, match=r"tensorflow-text is not installed; "):
        extras.require("tensorflow_text")
    assert extras.require("json", "tf").dumps([]) == "[]"
    with pytest.raises(ValueError, match="No extra is known for 'json'"):
        extras.require("json")


def test_require_names_the_extra_of_a_missing_dependency_of_the_same_extra(tmp_path, monkeypatch):
    # tensorflow-text installed without TensorFlow: the `tf` extra is incomplete.
    (tmp_path / "tf_probe_text.py").write_text("import tensorflow\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(extras.EXTRAS, "tf_probe_text", "tf")
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    with pytest.raises(extras.MissingExtraError, match=r"^tensorflow is not installed; .*\[tf\]"):
        extras.require("tf_probe_text")


def test_require_shows_a_broken_dependency_as_it_is(tmp_path, monkeypatch):
    (tmp_path / "gguf_broken_probe.py").write_text("import not_a_module_anywhere\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match="not_a_module_anywhere") as caught:
        extras.require("gguf_broken_probe", "gguf")
    assert not isinstance(caught.value, extras.MissingExtraError)


def test_docs_install_lists_every_extra(setup_cfg):
    _, extra = setup_cfg
    page = (ROOT / "docs" / "install.md").read_text(encoding="utf-8")
    for name in extra:
        assert f"`{name}`" in page, name


def test_as_missing_extra_turns_an_optional_import_error_into_the_line():
    err = ModuleNotFoundError("No module named 'official'", name="official.nlp")
    assert str(extras.as_missing_extra(err)) == (
        'tf-models-official is not installed; install the extra: pip install "headsize-tf[garden]"'
    )
    missing = extras.MissingExtraError("x")
    assert extras.as_missing_extra(missing) is missing
    assert extras.as_missing_extra(ModuleNotFoundError("No module named 'foo'", name="foo")) is None
    assert extras.as_missing_extra(ValueError("bad")) is None
