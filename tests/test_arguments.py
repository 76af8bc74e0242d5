"""The arguments, typed and defaulted once. XlaMonitor's defaults are MonitorConfig's, which validates
each argument once. The jit modes: ``JitMode`` (a Literal) is what the arguments validate against, and each
backend's ``JitController.apply`` dispatches on it with an exhaustive ``match``: a mode added to the
Literal makes mypy fail at each backend's ``assert_never`` and nowhere else, so the change is the Literal,
the two backends' branches and the docs."""

from __future__ import annotations

import dataclasses
import inspect
import pathlib
import shutil
import subprocess
import sys
import typing

import pytest

from xla_keras.config import MonitorConfig
from xla_keras.jit.modes import MODES, JitMode, validate_mode

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_the_modes_are_the_literals_and_bad_input_names_them():
    assert MODES == typing.get_args(JitMode) == ("keep", "on", "off", "autoclustering", "fastest")
    assert MonitorConfig(log_dir=None, jit="on").jit == "on"
    with pytest.raises(ValueError, match="jit must be one of 'keep', 'on', 'off', 'autoclustering', 'fastest'"):
        validate_mode("always")


@pytest.mark.slow
def test_mypy_fails_at_each_backends_dispatch_when_a_mode_is_added(tmp_path):
    # A scratch copy of the package with a sixth mode in the Literal, checked as a whole.
    shutil.copytree(ROOT / "xla_keras", tmp_path / "xla_keras", ignore=shutil.ignore_patterns("__pycache__", "static"))
    modes = tmp_path / "xla_keras" / "jit" / "modes.py"
    source = modes.read_text()
    literal = 'JitMode = Literal["keep", "on", "off", "autoclustering", "fastest"]'
    assert literal in source
    modes.write_text(source.replace(literal, literal[:-1] + ', "sixth"]'))
    config = ["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(tmp_path / "cache")]
    result = subprocess.run(
        [sys.executable, "-m", "mypy", *config, "xla_keras"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert result.returncode == 1, result.stdout + result.stderr
    where = sorted({line.split(":")[0] for line in errors})
    assert where == ["xla_keras/backends/jax/jit.py", "xla_keras/backends/tensorflow/jit.py"], errors
    assert all("assert_never" in line for line in errors), errors


def test_every_monitor_argument_is_a_config_field_with_the_same_default():
    import xla_keras

    monitor = inspect.signature(xla_keras.XlaMonitor).parameters
    fields = {f.name: f.default for f in dataclasses.fields(MonitorConfig)}
    assert list(monitor) == list(fields)
    assert {name: p.default for name, p in monitor.items()} == fields
