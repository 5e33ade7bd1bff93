"""The experiments' entry point: bad input and Ctrl-C in one line, bugs as tracebacks."""

import pytest

from headsize_tf.core.errors import CheckpointError, is_user_error
from headsize_tf.experiments._entry import run_main


def _exit_status(main, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exited:
        run_main(main, "study")
    return exited.value.code, capsys.readouterr().err


@pytest.mark.parametrize(
    "error",
    [
        ValueError("--runs x: expected\n names from a, b"),
        FileExistsError("Output out exists"),
        CheckpointError("ckpt holds no model"),
    ],
)
def test_bad_input_is_one_line_and_status_2(error, capsys):
    def main():
        raise error

    code, err = _exit_status(main, capsys)
    assert code == 2
    assert err == f"study: error: {' '.join(str(error).split())}\n"


def test_ctrl_c_is_one_line_and_status_130(capsys):
    def main():
        raise KeyboardInterrupt

    code, err = _exit_status(main, capsys)
    assert code == 130
    assert err.strip() == "study: interrupted; a rerun skips the finished runs"


def test_ctrl_c_that_tensorflow_re_raised_is_an_interrupt_too(capsys):
    def main():
        raise RuntimeError(
            "pybind11::error_already_set: MISMATCH of original and normalized active "
            "exception types: ORIGINAL InvalidArgumentError REPLACED BY KeyboardInterrupt: <EMPTY>"
        )

    code, err = _exit_status(main, capsys)
    assert code == 130
    assert err.strip() == "study: interrupted; a rerun skips the finished runs"


def test_the_status_of_main_is_the_exit_status(capsys):
    assert _exit_status(lambda: 0, capsys) == (0, "")
    assert _exit_status(lambda: None, capsys) == (0, "")
    assert _exit_status(lambda: 2, capsys) == (2, "")


def test_a_bug_keeps_its_traceback():
    def main():
        raise KeyError("a bug")

    assert not is_user_error(KeyError("a bug"))
    with pytest.raises(KeyError):
        run_main(main, "study")


@pytest.mark.parametrize(
    "module, argv, message",
    [
        ("kv_sharing_study", ["--output", "o", "--bogus"], "unrecognized arguments: --bogus"),
        ("compression_study", ["--output", "o", "--dims", "0"], "argument --dims: expected a"),
        ("reproduction", ["--preset", "nope"], "argument --preset: invalid choice: 'nope'"),
        ("bottleneck", [], "the following arguments are required: --output"),
    ],
)
def test_an_argument_error_is_one_line_naming_the_study(module, argv, message, capsys):
    import importlib

    name = f"headsize_tf.experiments.{module}"
    study = importlib.import_module(name)
    if not hasattr(study, "main"):  # A package: its command is its __main__.
        study = importlib.import_module(f"{name}.__main__")
    with pytest.raises(SystemExit) as exited:
        run_main(lambda: study.main(argv), module)
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert err.startswith(f"{module}: error: ") and message in err
    assert err.endswith(f"(see python -m {name} --help)\n") and err.count("\n") == 1
