"""``xla-keras diff`` and ``report/diff.py`` on reports made here (pure), and the command line's bad
input. Two real runs, one with a storm, are diffed in tests/test_tensorboard.py."""

import json
import math
import subprocess
import sys

import pytest

from xla_keras.core.signatures import Leaf
from xla_keras.report.diff import DIFF_SCHEMA_VERSION, Bounds, check, diff_reports, render_diff
from xla_keras.report.model import Compilation, XlaReport
from xla_keras.tensorboard.sink import write_report_json


def _compile(step, length, seconds=0.3, phase="train"):
    return Compilation(phase, step, (Leaf("x", "int32", (8, length)),), seconds, "profiler")


def _report(lengths, steady=0.001, storms=0, seconds=0.3, **kw):
    from xla_keras.storms.detection import Storm

    return XlaReport(
        compilations=[_compile(i + 1, n, seconds) for i, n in enumerate(lengths)],
        compilation_count={"train": len(lengths), "test": 0, "predict": 0},
        steps={"train": 100, "test": 0, "predict": 0},
        steady_step_seconds_by_phase={"train": steady, "test": None, "predict": None},
        steady_step_counts={"train": 90, "test": 0, "predict": 0},
        storms=[Storm("train", 9, 8, [], "advice", {"kind": "pad_to_lengths"}) for _ in range(storms)],
        **kw,
    )


def test_the_diff_says_what_changed_per_phase():
    diff = diff_reports(_report([16]), _report([16, 24, 32], steady=0.0012, storms=1))
    (train,) = diff.phases
    assert (train.baseline["compiles"], train.run["compiles"]) == (1, 3)
    assert train.run["compile_seconds"] == pytest.approx(0.9)
    assert train.added == ["x:int32[8,24]", "x:int32[8,32]"] and train.removed == []
    assert (train.baseline["storms"], train.run["storms"]) == (0, 1)
    text = render_diff(diff)
    assert "train  1 -> 3" in text and "1 ms -> 1.2 ms (90 steps)" in text and "+2 -0" in text
    assert "train: + x:int32[8,24]" in text and "within bounds" in text


@pytest.mark.parametrize(
    "bounds, crossed",
    [
        (Bounds(), None),
        (Bounds({"train": 3}), None),
        (Bounds({"train": 2}), "train compiled 3 times (at most 2)"),
        (Bounds({"test": 0}), None),  # the run never tested: 0 compiles
        (Bounds(max_compile_seconds_ratio=3.0), None),
        (Bounds(max_compile_seconds_ratio=2.0), "compile time 900 ms, 3.00x the baseline (at most 2.0x)"),
        (Bounds(max_steady_ratio=1.1), "train steady step 1.2 ms, 1.20x the baseline (at most 1.1x)"),
        (Bounds(max_steady_ratio=1.25), None),
    ],
)
def test_each_bound_is_checked_and_said_in_one_line(bounds, crossed):
    diff = diff_reports(_report([16]), _report([16, 24, 32], steady=0.0012))
    assert check(diff, bounds) == crossed
    assert "\n" not in (crossed or "")


def test_a_baseline_that_compiled_nothing_crosses_any_compile_time_ratio():
    diff = diff_reports(_report([]), _report([16]))
    assert "the baseline compiled nothing" in check(diff, Bounds(max_compile_seconds_ratio=10.0))


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"max_compiles": {"training": 1}}, "phase must be one of train, test, predict; got 'training'"),
        ({"max_compiles": {"train": -1}}, "a count >= 0; got -1"),
        ({"max_compile_seconds_ratio": 0}, "max compile seconds ratio: a finite number > 0; got 0"),
        ({"max_steady_ratio": math.nan}, "max steady ratio: a finite number > 0"),
    ],
)
def test_bad_bounds_name_what_is_accepted(kwargs, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        Bounds(**kwargs)


def test_an_old_jax_reports_dispatch_time_is_not_compared_and_the_diff_says_so():
    """A JAX report of schema 9 timed steps as JAX dispatched them: its steady figure was a dispatch time.
    The diff never sets it against a step time, nor holds a bound to it, and says why."""
    from xla_keras.report.schema import parse_report

    old = _report([16], steady=0.0004, backend="jax").to_dict()
    old["schema_version"] = 9
    del old["step_timing"]
    baseline = parse_report(old).report
    run = _report([16], steady=0.033, backend="jax")
    run.step_timing = {"train": {"basis": "between_drains", "steps": 90, "intervals": 4, "withheld": None}}
    diff = diff_reports(baseline, run)
    assert check(diff, Bounds(max_steady_ratio=1.1)) is None  # 80x "slower" is no regression: not compared
    assert diff.not_compared == [
        "train steady step: the baseline timed it as JAX dispatched it (a report of xla_keras before 0.4): "
        "a dispatch time, not a step time"
    ]
    for fmt in ("text", "markdown"):
        text = render_diff(diff, fmt)
        assert "not compared: a dispatch time" in text and "33 ms" not in text
        assert "not compared: train steady step: the baseline timed it as JAX dispatched it" in text
    assert json.loads(render_diff(diff, "json"))["not_compared"] == diff.not_compared


def test_a_withheld_steady_step_is_said_withheld():
    run = _report([16], steady=None)
    run.step_timing = {"train": {"basis": "between_drains", "steps": 0, "intervals": 0, "withheld": "no interval"}}
    text = render_diff(diff_reports(_report([16]), run))
    assert "1 ms -> withheld" in text


def test_markdown_is_a_table_for_a_pull_request_and_json_carries_its_schema():
    diff = diff_reports(_report([16]), _report([16, 24], storms=1))
    check(diff, Bounds({"train": 1}))
    markdown = render_diff(diff, "markdown", ("main", "branch"))
    assert markdown.startswith("**XLA compiles: `branch` against `main`**")
    assert "| phase | compiles | compile time | steady step | signatures | storms |" in markdown
    assert "| train | 1 -> 2 |" in markdown and "- train: new signature `x:int32[8,24]`" in markdown
    assert markdown.endswith("**bounds crossed: train compiled 2 times (at most 1)**")
    data = json.loads(render_diff(diff, "json", ("main", "branch")))
    assert data["diff_schema_version"] == DIFF_SCHEMA_VERSION and data["run"] == "branch"
    assert data["phases"][0]["signatures_added"] == ["x:int32[8,24]"]
    assert data["crossed"] == "train compiled 2 times (at most 1)"
    with pytest.raises(ValueError, match="format must be one of text, markdown, json; got 'html'"):
        render_diff(diff, "html")


def test_capped_records_and_the_fastest_decision_are_said():
    base = _report([16], jit_decision={"mode": "on", "basis": "measured"})
    run = _report([16], compilations_dropped=3, jit_decision={"mode": "off", "basis": "measured"})
    text = render_diff(diff_reports(base, run))
    assert "jit='fastest' decision: on (measured) -> off (measured)" in text
    assert "some signatures may be missing" in text


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "xla_keras", "diff", *args], capture_output=True, text=True)


def test_the_command_line_exits_0_1_or_2(tmp_path):
    write_report_json(str(tmp_path / "base"), _report([16]).to_dict())
    write_report_json(str(tmp_path / "run"), _report([16, 24]).to_dict())
    base, run = str(tmp_path / "base"), str(tmp_path / "run" / "xla_report.json")  # a log dir, a file
    empty = tmp_path / "empty"
    empty.mkdir()
    ok = _cli(base, run)
    assert ok.returncode == 0 and "within bounds" in ok.stdout, ok.stderr
    old = tmp_path / "old.json"  # a 0.1 report (schema 1: no schema_version), read through parse_report
    old.write_text(json.dumps({"jit_mode": "on", "jit_active": True, "compilations": [], "steps": {"train": 5}}))
    read = _cli(str(old), run, "--max-compiles", "train=2")
    assert read.returncode == 0 and "train  0 -> 2" in read.stdout, read.stderr
    crossed = _cli(base, run, "--max-compiles", "train=1", "--format", "markdown")
    assert crossed.returncode == 1 and crossed.stderr.strip() == "xla-keras diff: train compiled 2 times (at most 1)"
    assert "| train | 1 -> 2 |" in crossed.stdout
    for args, words in [
        ((base, str(tmp_path / "missing")), "is neither a log directory nor an xla_report.json file"),
        ((base, str(empty)), "no xla_report.json under"),
        ((base, run, "--max-compiles", "training=1"), "phase must be one of train, test, predict"),
        ((base, run, "--max-compiles", "train=x"), "PHASE=N with N a count"),
        ((base, run, "--max-steady-ratio", "-1"), "max steady ratio: a finite number > 0; got -1.0"),
        ((base, run, "--format", "html"), "invalid choice: 'html' (choose from 'text', 'markdown', 'json')"),
        ((base,), "the following arguments are required: run"),
    ]:
        bad = _cli(*args)
        assert bad.returncode == 2 and words in bad.stderr, (args, bad.stderr)
