"""The public API under Keras's JAX backend: JIT modes, TensorBoard output, traces, the XLA tab,
compare(), the doctor, and a quiet fit. Fits run in subprocesses (tests/jax_checks.py) because
Keras's backend is fixed when keras is first imported; what they wrote is read back here."""

import collections
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("jax")

import forked
from runs import Runs
from test_quiet import _normalise, _ours
from test_tab_plugin import get_json, tab_client

from xla_keras.core.tags import TAG_COMPILATIONS, TAG_STEP_TIME
from xla_keras.report.schema import REPORT_FILE, parse_report

pytestmark = [pytest.mark.scenario, pytest.mark.xdist_group("test_jax_monitor")]

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SCRIPT = os.path.join(HERE, "jax_checks.py")


def _env(**extra):
    env = dict(
        os.environ,
        KERAS_BACKEND="jax",
        CUDA_VISIBLE_DEVICES="",
        JAX_PLATFORMS="cpu",
        PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    env.update(extra)
    return env


def _run(args):
    argv = [sys.executable, SCRIPT, *args]
    if args[0] == "--quiet":  # compares every line a whole interpreter prints, its start included
        proc = subprocess.run(argv, env=_env(), capture_output=True, text=True, timeout=900)
    else:
        proc = forked.run(argv, env=_env(), timeout=900)
    assert proc.returncode == 0, proc.stderr[-5000:]
    return proc.stderr


def _jax_checks(root):
    return {
        "main": lambda: _run([str(root / "checks.json"), str(root / "logs")]),
        "bare": lambda: _run(["--quiet", "bare", str(root / "quiet_bare")]),
        "monitored": lambda: _run(["--quiet", "monitored", str(root / "quiet_monitored")]),
    }


@pytest.fixture(scope="module")
def checks(tmp_path_factory):
    runs = Runs(_jax_checks, tmp_path_factory, "test_jax_monitor::checks")
    runs["main"]
    with open(runs.root / "checks.json") as f:
        results = json.load(f)
    results["quiet"] = {"bare": runs["bare"], "monitored": runs["monitored"]}
    results["root"] = str(runs.root)
    return results


def test_jit_modes_are_read_back_from_the_step_that_runs(checks):
    modes = checks["modes"]
    assert modes["keep"]["jit_active"] is True and "jax.jit" in modes["keep"]["reason"]
    assert modes["on"]["jit_active"] is True and modes["on"]["compiles"] == 1 and modes["on"]["model_jit_after"]
    assert modes["off"]["jit_active"] is False and modes["off"]["compiles"] == 0
    assert "op by op" in modes["off"]["reason"] and not modes["off"]["model_jit_after"]
    assert modes["run_eagerly"]["jit_active"] is False and "eagerly" in modes["run_eagerly"]["reason"]


def test_autoclustering_is_refused_as_a_tensorflow_feature(checks):
    for text in (checks["modes"]["autoclustering"], checks["modes"]["configure_autoclustering"]):
        assert text.startswith("ValueError") and "TensorFlow" in text and "JAX" in text
    assert "'keep', 'on', 'off' or 'fastest'" in checks["modes"]["autoclustering"]


def test_scalars_text_and_report_file_are_written_as_on_tensorflow(checks):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log_dir = checks["tensorboard"]["log_dir"]
    train = EventAccumulator(os.path.join(log_dir, "train"), size_guidance={"tensors": 0})
    train.Reload()
    tags = set(train.Tags()["tensors"]) | set(train.Tags()["scalars"])
    assert {TAG_COMPILATIONS, TAG_STEP_TIME, "xla/report", "xla/report_data"} <= tags, tags
    # update_freq="batch" under JAX: one point per interval between drains, at its last step (each epoch of
    # 15 steps here, the first one's compile left out), never a dispatch time per step.
    points = train.Scalars(TAG_STEP_TIME)
    assert [p.step for p in points] == [15, 30] and all(p.value > 0 for p in points)
    validation = EventAccumulator(os.path.join(log_dir, "validation"), size_guidance={"tensors": 0})
    validation.Reload()
    assert TAG_COMPILATIONS in validation.Tags()["scalars"]
    with open(os.path.join(log_dir, REPORT_FILE)) as f:
        parsed = parse_report(json.load(f))
    assert parsed.report.backend == "jax" and parsed.report.probe == "jax.monitoring"
    assert parsed.report.steps == {"train": 30, "test": 10, "predict": 0}
    assert parsed.report.step_timing["train"]["basis"] == "between_drains"
    # Every interval is written; the figure rests on those within 10x the weighted median of all (a first
    # interval that held the process's first executions may be left out).
    assert 1 <= parsed.report.step_timing["train"]["intervals"] <= len(points)


def test_jax_profiler_traces_land_where_the_profile_tab_finds_them(checks):
    traces = checks["tensorboard"]["traces"]
    assert len(traces) == 1 and traces[0].startswith("range: ")
    session = traces[0].split(": ", 1)[1]
    assert os.path.dirname(session).endswith(os.path.join("train", "plugins", "profile"))
    assert any(name.endswith(".xplane.pb") for name in os.listdir(session))


def test_the_xla_tab_shows_jax_runs(checks):
    client, _ = tab_client(os.path.join(checks["root"], "logs"))
    runs = {r["run"]: r for r in get_json(client, "/runs")["runs"]}
    assert {"fit", "compare/off", "compare/on"} <= set(runs)
    view = get_json(client, "/report?run=fit")
    assert view["status"]["backend"] == "jax" and view["status"]["jit_active"] is True
    assert view["ledger"] and all(row["source"] == "jax" for row in view["ledger"])


def test_compare_runs_off_and_on_under_jax(checks):
    table = checks["compare"]["table"]
    rows = {r["mode"]: r for r in table["results"]}
    assert list(rows) == ["off", "on"]
    assert rows["off"]["xla_ran"] is False and rows["off"]["compiles"] == 0
    assert rows["on"]["xla_ran"] is True and rows["on"]["compiles"] == 1
    assert "TensorFlow feature" in checks["compare"]["bad_mode"]


def test_a_monitored_jax_fit_prints_no_framework_line_a_bare_fit_does_not(checks):
    quiet = checks["quiet"]
    ours, framework = _ours(quiet["monitored"])
    bare = collections.Counter(_normalise(line) for line in quiet["bare"].splitlines())
    extra = collections.Counter(_normalise(line) for line in framework) - bare
    assert not extra, f"lines the monitored fit added: {list(extra.elements())[:10]}"
    storms = [line for line in ours if "Recompilation storm (train)" in line]
    assert len(storms) == 1


def test_doctor_reports_the_backend_devices_cache_and_flags(tmp_path):
    env = _env(XLA_FLAGS="--xla_force_host_platform_device_count=2")
    proc = subprocess.run(
        [sys.executable, "-m", "xla_keras", "doctor"], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "Keras runs the JAX backend" in out and "jax 0." in out
    assert "2 JAX device(s): cpu:0, cpu:1" in out
    assert "XLA_FLAGS: --xla_force_host_platform_device_count=2" in out and "JAX started and compiled" in out
    assert "persistent compilation cache" in out
    bad = subprocess.run(
        [sys.executable, "-m", "xla_keras", "doctor"],
        env=_env(XLA_FLAGS="--xla_no_such_flag=1"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode == 1 and "[error] flags" in bad.stdout
