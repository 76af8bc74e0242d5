"""The xla-keras command line, run as a user runs it."""

import json
import subprocess
import sys

import pytest

from xla_keras.report.model import XlaReport
from xla_keras.tensorboard.sink import write_report_json


def xla_keras_cli(*args):
    return subprocess.run([sys.executable, "-m", "xla_keras", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture
def log_dir(tmp_path):
    report = XlaReport(
        jit_mode="on",
        jit_active=True,
        jit_reason="because",
        compile_seconds=1.5,
        steps={"train": 10, "test": 0, "predict": 0},
        compilation_count={"train": 3, "test": 0, "predict": 0},
    )
    write_report_json(str(tmp_path / "run1"), report.to_dict())
    return tmp_path


def test_report_prints_the_summary(log_dir):
    result = xla_keras_cli("report", str(log_dir / "run1"))
    assert result.returncode == 0, result.stderr
    assert "jit requested   : on" in result.stdout and "train 3" in result.stdout


def test_report_full_prints_every_note_whole_and_the_summary_trims_it(tmp_path):
    note = "the persistent compilation cache was configured too late for this process " * 4
    write_report_json(str(tmp_path / "run"), XlaReport(jit_mode="on", notes=[note]).to_dict())
    short, full = (xla_keras_cli("report", str(tmp_path / "run"), *extra) for extra in ((), ("--full",)))
    assert short.returncode == full.returncode == 0, short.stderr + full.stderr
    for result in (short, full):
        assert max(map(len, result.stdout.splitlines())) <= 100
    assert " ".join(note.split()) in " ".join(full.stdout.split())
    assert " ".join(note.split()) not in " ".join(short.stdout.split())
    assert "details         : report.details()" in short.stdout


def test_report_json_round_trips(log_dir):
    result = xla_keras_cli("report", str(log_dir / "run1"), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["compilation_count"]["train"] == 3


def test_report_finds_every_run_under_a_parent(log_dir):
    write_report_json(str(log_dir / "run2"), XlaReport(jit_mode="off").to_dict())
    result = xla_keras_cli("report", str(log_dir))
    assert result.stdout.count("XLA report") == 2 and "run2" in result.stdout


@pytest.mark.parametrize(
    "args, code, words",
    [
        (("bogus",), 2, ["must be one of report, diff, doctor, explain", "'bogus'"]),
        ((), 2, ["must be one of report"]),
        (("report",), 2, ["usage"]),
        (("report", "/does/not/exist"), 2, ["not a directory"]),
    ],
)
def test_bad_input_gets_a_clear_error(args, code, words):
    result = xla_keras_cli(*args)
    assert result.returncode == code
    for word in words:
        assert word in result.stderr


def test_empty_dir_and_malformed_report(tmp_path):
    result = xla_keras_cli("report", str(tmp_path))
    assert result.returncode == 1 and "no xla_report.json" in result.stderr
    (tmp_path / "xla_report.json").write_text('{"compilations": [{"phase": "train"}]}')
    result = xla_keras_cli("report", str(tmp_path))
    assert result.returncode == 1 and "cannot read" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("flag", ["--help", "-h", "help"])
def test_help_lists_the_commands(flag):
    result = xla_keras_cli(flag)
    assert result.returncode == 0
    for command in ("report LOGDIR", "doctor", "explain LOGFILE"):
        assert command in result.stdout


def test_version():
    import xla_keras

    result = xla_keras_cli("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"xla-keras {xla_keras.__version__}"


@pytest.mark.parametrize("as_json", [False, True])
def test_one_broken_report_does_not_hide_the_others(log_dir, as_json):
    (log_dir / "broken").mkdir()
    (log_dir / "broken" / "xla_report.json").write_text("[]")  # valid JSON, not a report
    result = xla_keras_cli("report", str(log_dir), *(["--json"] if as_json else []))
    assert result.returncode == 1
    assert "broken" in result.stderr and "not an XlaMonitor report" in result.stderr
    if as_json:  # several files found: keyed by directory, whatever parsed
        assert list(json.loads(result.stdout)) == [str(log_dir / "run1")]
    else:
        assert "XLA report" in result.stdout and "== " in result.stdout


def test_the_report_file_is_as_readable_as_the_event_files(tmp_path):
    import os

    path = write_report_json(str(tmp_path / "run"), XlaReport(jit_mode="off").to_dict())
    umask = os.umask(0o022)
    os.umask(umask)
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~umask
    assert [f for f in os.listdir(tmp_path / "run")] == ["xla_report.json"]  # no temporary left behind


def test_report_prints_the_jit_fix_whole_in_100_columns_for_a_saved_log_dir(tmp_path):
    """A reader of a saved log dir has no monitor: the code is printed, not pointed at."""
    code = "\n".join(
        [
            "# xla_keras: Keras runs no step of this model with XLA while words (StringLookup) is in it",
            'words = model.get_layer("words")',
            "dataset = dataset.map(lambda x, y: "
            '({**x, "a_rather_long_input_key": words(x["a_rather_long_input_key"])}, y))',
        ]
    )
    report = XlaReport(jit_mode="on", jit_active=False, jit_reason="Keras refused jit_compile=True", jit_fix=code)
    write_report_json(str(tmp_path / "run"), report.to_dict())
    for extra in ((), ("--full",)):
        result = xla_keras_cli("report", str(tmp_path / "run"), *extra)
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert max(map(len, lines)) <= 100 and "too long" not in result.stdout
        assert "monitor.report" not in result.stdout
        assert "  fix (code)      :" in lines and '    words = model.get_layer("words")' in lines
        at = lines.index('    words = model.get_layer("words")') + 1
        assert lines[at].startswith("    dataset = dataset.map(") and lines[at].endswith(" \\")  # continued
        assert lines[at + 1].startswith("        ") and lines[at + 1].endswith("}, y))")
