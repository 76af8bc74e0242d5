"""Every sentence true, on real fits (tests/truth_fits.py, one subprocess with
``XLA_FLAGS=--xla_dump_to``): a comparison of steady steps only from enough steps, and in the
direction separate fits with XLA on and off measure; every note borne out by the records; one fix
per storm, or the change said; advice that fits its call and its data; the jit line for fit,
evaluate and predict alike."""

import json
import math
import os
import re
import sys

import forked
import pytest
from conftest import RUNS
from note_checks import problems
from runs import Runs

pytest.importorskip("tensorflow")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

pytestmark = [pytest.mark.scenario, pytest.mark.xdist_group("scenario_runs")]


def _fits(root, only=()):
    def run():
        dump, out = root / "dump", root / "truth.json"
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="", XLA_FLAGS=f"--xla_dump_to={dump}")
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # as the script would: TensorFlow reads it at import
        env.pop("TF_XLA_FLAGS", None)
        proc = forked.run(
            [
                sys.executable,
                os.path.join(HERE, "truth_fits.py"),
                str(out),
                str(dump),
                *([",".join(only)] if only else []),
            ],
            env=env,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        with open(out) as f:
            return json.load(f)

    return {"tensorflow": run}


# truth_fits.py's fits but ``separate`` (the timed test's alone, below), run by the untimed tests.
UNTIMED = (
    "fallback_early",
    "fallback_late",
    "trace_window",
    "two_fits",
    "advice_of_fit_1",
    "evaluate_budget",
    "predict_status",
)


@pytest.fixture(scope="module")
def fits(tmp_path_factory):
    return Runs(lambda root: _fits(root, UNTIMED), tmp_path_factory, "test_truth::fits")["tensorflow"]


@pytest.fixture(scope="module")
def timed_fits(tmp_path_factory):
    """The fits whose step times are compared with separate fits' clock: run in the timed invocation, with
    nothing beside them (the other worker's fits could tilt a fallback's before against its after)."""
    return Runs(lambda root: _fits(root, ("fallback_late", "separate")), tmp_path_factory, "test_truth::timed")[
        "tensorflow"
    ]


def _flat(text):
    return " ".join(text.split())


def _ratio(text):
    return [float(r) for r in re.findall(r"(\d+\.\d)x\b", text)]


# ------------------------------------------------------------------ figures from enough steps


def test_a_fallback_with_one_steady_xla_step_states_no_ratio(fits):
    run = fits["fallback_early"]
    fallback = run["report"]["fallback"]
    # Step 3 repeated step 1's shape: the one steady XLA step before the switch at step 9.
    assert fallback["step"] == 9 and fallback["xla_steady_steps"]["train"] == 1
    assert fallback["steady_steps_after"]["train"] >= 20
    assert "too few steady steps to compare (1 with XLA before the switch" in _flat(run["text"])
    assert not _ratio(run["text"])
    assert run["dumped"] == sum(run["report"]["compilation_count"].values()) == 8


@pytest.mark.timed
def test_a_fallback_with_enough_steps_compares_in_the_direction_separate_fits_measure(timed_fits):
    run, separate = timed_fits["fallback_late"], timed_fits["separate"]["separate_ms"]
    fallback = run["report"]["fallback"]
    assert fallback["xla_steady_steps"]["train"] >= 20 and fallback["steady_steps_after"]["train"] >= 20
    stated = fallback["steady_step_seconds_after"]["train"] / fallback["xla_steady_step_seconds"]["train"]
    assert _ratio(run["text"]) == [round(stated, 1)]
    truth = separate["off"] / separate["on"]  # XLA off against on, timed by a callback in separate fits
    # The size the separate fits measure, within the noise of two fits on a busy 2-core machine (the
    # wrong-way report was off by 3x), and their direction whenever they tell one clearly (the model
    # makes XLA ~2x faster on a CPU: docs/benchmarks.md).
    assert abs(math.log(stated / truth)) < math.log(1.6), (stated, separate)
    if truth > 1.15:
        assert stated > 1.0, (stated, separate)
    assert f"with XLA before the switch ({fallback['xla_steady_steps']['train']} steps)" in _flat(run["text"])


# ------------------------------------------------------------------ notes borne out by the records


@pytest.mark.parametrize("key", sorted(RUNS))
def test_every_note_of_the_ground_truth_scenarios_is_borne_out_by_its_records(scenario_runs, key):
    assert problems(scenario_runs(key).report) == []


@pytest.mark.parametrize("kind", UNTIMED)
def test_every_note_of_these_fits_is_borne_out_by_its_records(fits, kind):
    assert problems(fits[kind]["report"]) == []


def test_autoclustering_in_a_trace_window_says_nothing_was_estimated(scenario_runs):
    run = scenario_runs("partial_batch-auto-configure")
    report = run.report
    assert report["traces"], "the automatic trace window opened"
    assert sum(report["compilation_count"].values()) == run.dump_modules > 0
    reasons = {c["estimated_because"] for c in report["compilations"] if c["source"] == "timing"}
    assert len([n for n in report["notes"] if "estimated from step time" in n]) == len(reasons)


def test_compiles_in_a_trace_window_are_estimated_and_the_note_names_them(fits):
    report = fits["trace_window"]["report"]
    estimated = [c for c in report["compilations"] if c["source"] == "timing"]
    assert estimated and {c["estimated_because"] for c in estimated} == {"trace_window"}
    assert [c["step"] for c in estimated] == [1, 2, 3]  # profile=(1, 3): the new shapes of steps 1-3
    assert fits["trace_window"]["dumped"] == sum(report["compilation_count"].values()) == 5


# ------------------------------------------------------------------ one fix per storm


def test_the_warnings_fix_and_the_reports_agree_or_the_report_says_what_changed(fits):
    run = fits["fallback_early"]
    (warning,) = run["warnings"]
    so_far = re.search(r"# size (\d+) so far", warning)
    storm = run["report"]["storms"][0]
    assert so_far and int(so_far.group(1)) == storm["fix_at_storm"]["size"] == 16
    assert storm["fix"]["size"] == 25  # 25 rows came most often by the end
    assert "Recomputed from every shape seen by the end: size 25 (size 16 when the storm opened" in storm["advice"]
    assert "the most frequent batch size seen" in storm["advice"]
    assert "fix changed : size 25 from every shape seen (size 16 at the storm)" in _flat(run["summary"])


def test_a_fix_that_held_has_no_recomputed_words(fits):
    storm = fits["fallback_late"]["report"]["storms"][0]
    assert storm["fix_at_storm"] is None and "Recomputed" not in storm["advice"]


# ------------------------------------------------------------------ advice that fits its call and data


def test_two_fits_batched_differently_on_purpose_get_no_advice(fits):
    run = fits["two_fits"]
    report = run["report"]
    assert run["dumped"] == report["compilation_count"]["train"] == 2  # one compile per fit
    assert report["advice"] == []


def test_an_earlier_fits_advice_names_that_fit(fits):
    """Fit 1 ends with a partial batch (two compiles: advice); fit 2, at another batch size, compiles
    once: the advice is fit 1's, and says so."""
    run = fits["advice_of_fit_1"]
    report = run["report"]
    assert run["dumped"] == report["compilation_count"]["train"] == 3
    (advice,) = report["advice"]
    assert (advice["run"], advice["run_index"], advice["compiles"]) == ("fit", 1, 2)
    assert advice["advice"].startswith("Compile budget (train, fit 1): training compiled 2 times")
    assert "ADVICE (train, fit 1)" in run["summary"]


def test_an_evaluates_budget_advice_speaks_of_the_evaluate_and_of_arrays(fits):
    (advice,) = fits["evaluate_budget"]["report"]["advice"]
    assert (advice["run"], advice["run_index"], advice["fix"]["kind"]) == ("evaluate", 1, "pad_remainder")
    text = advice["advice"]
    assert "Compile budget (test, evaluate 1): evaluate compiled 2 times" in text
    assert "judged on evaluate 1's time alone" in text
    assert "epoch" not in text.split("). ")[0] and "padding" not in text.split("). ")[0]
    assert "batches = [(x[i:i + 32], y[i:i + 32]) for i in range(0, len(x), 32)]" in text
    assert "model.fit(" not in text and "ds = " not in fits["evaluate_budget"]["summary"]


def test_the_storm_advice_on_a_pydataset_names_the_pydataset(fits):
    run = fits["fallback_early"]
    assert "Fix: data = xla_keras.data.apply_fix(data, " in run["warnings"][0]
    assert "batch_size=" not in run["report"]["storms"][0]["advice"]  # no call that a PyDataset ignores


# ------------------------------------------------------------------ the same jit line for every call


@pytest.mark.parametrize("kind", ["evaluate_budget", "predict_status"])
def test_a_standalone_call_prints_the_jit_line_as_fit_does_and_its_summary_on_a_line_of_its_own(fits, kind):
    stdout = fits[kind]["stdout"]
    assert stdout.count("xla_keras: jit='on' -> XLA ON: jit_compile=True") == 1
    assert "\nxla_keras: XLA ran (jit='on')" in stdout  # after Keras's progress bar, not on its line
