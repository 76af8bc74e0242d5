"""What the XLA tab shows, from report dicts: pure, no TensorBoard server, no TensorFlow."""

import gzip
import json

import pytest

from xla_keras.tensorboard import views
from xla_keras.tensorboard.metadata import decode_report_data, encode_report_data


def sig(*leaves):
    """sig(("x", "int32", [8, 84]), ("y", "float32", [8, 1]))"""
    return [{"path": p, "dtype": d, "shape": list(s)} for p, d, s in leaves]


def xy(batch, length):
    return sig(("x", "int32", (batch, length)), ("y", "float32", (batch, 1)))


@pytest.mark.parametrize(
    "old, new, last_batch, text",
    [
        (None, xy(8, 84), False, "first signature"),
        (xy(8, 84), xy(8, 90), False, "x axis 1: 84 → 90"),
        (xy(64, 84), xy(16, 84), True, "batch 64 → 16 (last batch)"),
        (xy(64, 84), xy(16, 84), False, "batch 64 → 16"),
        (xy(8, 84), xy(4, 90), False, "x axis 0: 8 → 4; x axis 1: 84 → 90; y axis 0: 8 → 4"),
        (sig(("x", "int32", (8, 84))), xy(8, 84), False, "y:float32[8,1] added"),
        (xy(8, 84), sig(("x", "int32", (8, 84))), False, "y:float32[8,1] removed"),
        (xy(8, 84), sig(("x", "int64", (8, 84)), ("y", "float32", (8, 1))), False, "x:int32[8,84] → x:int64[8,84]"),
        (sig(("x", "int32", (None, 84))), sig(("x", "int32", (8, 84))), False, "batch ? → 8"),
        (xy(8, 84), xy(8, 84), False, "no shape change"),
    ],
)
def test_what_changed_is_said_in_words(old, new, last_batch, text):
    assert views.change_text(old, new, last_batch) == text


def compile_row(phase, step, signature, seconds=0.25, source="profiler", cached=False, last_batch=False, **more):
    return {
        "phase": phase,
        "step": step,
        "signature": signature,
        "seconds": seconds,
        "source": source,
        "cached": cached,
        "last_batch": last_batch,
        **more,
    }


def test_the_ledger_compares_each_row_with_the_previous_distinct_signature_of_its_phase():
    rows = views.ledger(
        [
            compile_row("train", 1, xy(8, 84)),
            compile_row("train", 1, xy(8, 84), seconds=0.5),  # auto-clustering: a second module, one row
            compile_row("test", 1, xy(8, 70)),  # its own phase: first signature there
            compile_row("train", 3, xy(8, 90)),
            compile_row("train", 6, xy(4, 90), last_batch=True),
            compile_row("test", 2, xy(8, 77), source="timing", cached=None),
        ]
    )
    assert [r["changed"] for r in rows] == [
        "first signature",
        "first signature",
        "x axis 1: 84 → 90",
        "batch 8 → 4 (last batch)",
        "x axis 1: 70 → 77",
    ]
    assert [r["index"] for r in rows] == [1, 2, 3, 4, 5]
    assert [r["first_record"] for r in rows] == [1, 3, 4, 5, 6]
    assert [r["modules"] for r in rows] == [2, 1, 1, 1, 1]
    assert [r["modules_words"] for r in rows] == ["2 modules", "1 module", "1 module", "1 module", "1 module"]
    assert rows[0]["seconds"] == pytest.approx(0.75) and rows[0]["steps"] == "step 1"
    assert rows[2]["signature"] == "x:int32[8,90] y:float32[8,1]"
    assert rows[4]["source"] == "timing" and rows[4]["cached"] is None
    assert rows[3]["last_batch"] is True and rows[0]["last_batch"] is False


def test_the_tabs_ledger_groups_as_the_printed_report_does():
    """Auto-clustering's modules of one signature in one row with their count; a one-off program's modules
    (TensorFlow's variable initialiser) in a row of their own; compiles a value causes at a known signature,
    over several steps, in one row with the cause in words: the rows and counts of report/ledger_rows.py."""
    from xla_keras.report.ledger_rows import cause_words, ledger_rows

    why = "tf.math.top_k's k in layer 'pick' (your line: model.py:12) is computed from the batch"
    records = [
        compile_row("train", 1, xy(8, 84), 0.06, outside_step="initialize_variables", cause="signature"),
        *[compile_row("train", 1, xy(8, 84), 0.4, cause="signature") for _ in range(3)],
        *[compile_row("train", 4, xy(4, 84), 0.5, last_batch=True, cause="signature") for _ in range(3)],
        *[compile_row("train", step, xy(8, 84), 0.2, cause="value", why=why) for step in (5, 6, 7)],
    ]
    rows = views.ledger(records)
    grouped = ledger_rows(records)
    assert len(rows) == len(grouped) == 4
    assert [r["modules"] for r in rows] == [g["compiles"] for g in grouped] == [1, 3, 3, 3]
    assert sum(r["modules"] for r in rows) == len(records)
    assert [r["seconds"] for r in rows] == pytest.approx([0.06, 1.2, 1.5, 0.6])
    assert [(r["step"], r["last_step"], r["steps"]) for r in rows] == [
        (1, 1, "step 1"),
        (1, 1, "step 1"),
        (4, 4, "step 4"),
        (5, 7, "steps 5-7"),
    ]
    assert rows[0]["outside_step"] == "initialize_variables"
    assert rows[0]["cause"].startswith("outside the step's program: TensorFlow's one-off initialiser of the variables")
    assert [r["cause"] for r in rows[1:]] == ["", "", cause_words("value", why)]
    assert rows[3]["cause"].startswith("new values of tf.math.top_k's k in layer 'pick'")
    assert [r["changed"] for r in rows] == [
        "first signature",
        "first signature",
        "batch 8 → 4 (last batch)",
        "batch 4 → 8",
    ]
    assert [r["first_record"] for r in rows] == [1, 2, 5, 8]


def test_a_baseline_is_compared_row_by_row():
    """Against a baseline: the run's rows whose signature the baseline never compiled, by row index; the
    baseline's signatures the run never compiled, each once."""
    run = [compile_row("train", 1, xy(8, 84)) for _ in range(3)] + [compile_row("train", 4, xy(4, 84))] * 2
    base = [compile_row("train", 1, xy(8, 84))] * 2 + [compile_row("train", 5, xy(2, 84))] * 2
    against = views.against_baseline(views.ledger(run), "main", {"compilations": base})
    assert against["new"] == [2]  # the row of the 4-row batch (its 2 modules)
    assert against["gone"] == [{"phase": "train", "signature": "x:int32[2,84] y:float32[2,1]"}]


@pytest.mark.parametrize(
    "tensorboard_run, run",
    [
        ("train", "."),
        ("validation", "."),
        ("fit1/train", "fit1"),
        ("compare/off/train", "compare/off"),
        ("fit1/train/plugins/profile/x", None),
        ("other", None),
        ("fit1/trainer", None),
    ],
)
def test_a_tab_run_is_the_monitors_log_dir(tensorboard_run, run):
    assert views.tab_run(tensorboard_run) == run
    if run is not None and tensorboard_run.endswith("train"):
        assert views.tensorboard_run(run) == tensorboard_run


def test_traces_name_the_profile_tabs_run():
    report = {
        "traces": [
            "steady: /logs/fit1/train/plugins/profile/2026_12_01_10_00_00",
            "storm: /logs/fit1/train/plugins/profile/2026_12_01_10_00_09/",
        ]
    }
    assert views.traces(report, "fit1") == [
        {"kind": "steady", "session": "2026_12_01_10_00_00", "profile_run": "fit1/train/2026_12_01_10_00_00"},
        {"kind": "storm", "session": "2026_12_01_10_00_09", "profile_run": "fit1/train/2026_12_01_10_00_09"},
    ]
    assert views.traces(report, ".")[0]["profile_run"] == "train/2026_12_01_10_00_00"


def full_report(**overrides):
    from xla_keras.core.signatures import from_jsonable
    from xla_keras.report.model import Compilation, XlaReport
    from xla_keras.storms.detection import Storm

    report = XlaReport(
        jit_mode="on",
        jit_active=True,
        jit_reason="jit='on': the train function runs with jit_compile=True",
        compilations=[
            Compilation("train", 1, from_jsonable(xy(8, 84)), 0.31, "profiler"),
            Compilation("train", 4, from_jsonable(xy(8, 90)), 0.29, "profiler", cached=True),
        ],
        compilation_count={"train": 2, "test": 0, "predict": 0},
        distinct_signatures={"train": 2, "test": 0, "predict": 0},
        storms=[
            Storm(
                "train",
                4,
                2,
                [{"path": "x", "axis": 1, "min": 84, "max": 90, "n_values": 2, "values": [84, 90]}],
                "pad it",
                {"kind": "pad_to_lengths", "code": "dataset = dataset.padded_batch(8)"},
                2,
                0.6,
                0.002,
                1,
                "warn",
            )
        ],
        steps={"train": 10, "test": 0, "predict": 0},
        steady_step_seconds=0.002,
        compile_seconds=0.6,
        wall_seconds=1.5,
        compile_share=0.4,
        traces=["steady: /l/train/plugins/profile/s1"],
        notes=["a note"],
    )
    for k, v in overrides.items():
        setattr(report, k, v)
    return report.to_dict()


def test_the_run_view_carries_the_reports_own_numbers():
    report = full_report()
    view = views.run_view("fit1", report)
    s = view["status"]
    assert (s["jit_mode"], s["jit_active"], s["jit_reason"]) == ("on", True, report["jit_reason"])
    assert s["compilation_count"] == report["compilation_count"] and s["total_compilations"] == 2
    assert (s["compile_seconds"], s["wall_seconds"], s["compile_share"]) == (0.6, 1.5, 0.4)
    assert s["steady_step_seconds"] == 0.002 and s["break_even_steps"] is None
    # The figures in the words the summary uses: the tab says what each rests on, as the terminal does.
    assert s["compile_time_words"] == "600 ms = 40% of 1.50 s monitored"
    assert s["break_even_words"] == "unknown (no non-XLA baseline measured)" and s["fallback_words"] == ""
    assert [r["seconds"] for r in view["ledger"]] == [c["seconds"] for c in report["compilations"]]
    assert [r["cached"] for r in view["ledger"]] == [False, True]
    assert view["storms"][0]["fix_code"] == "dataset = dataset.padded_batch(8)"
    assert view["storms"][0]["advice"] == "pad it" and view["storms"][0]["count"] == 2
    assert view["traces"][0]["profile_run"] == "fit1/train/s1"
    assert view["notes"] == ["a note"] and view["messages"] == []
    json.dumps(view, allow_nan=False)  # what the route returns


def test_the_status_says_a_withheld_steady_step_and_an_old_jax_reports_dispatch_time():
    withheld = full_report(
        steady_step_seconds=None,
        steady_step_seconds_by_phase={"train": None, "test": None, "predict": None},
        step_timing={"train": {"basis": "between_drains", "steps": 0, "intervals": 0, "withheld": "no interval yet"}},
        backend="jax",
    )
    s = views.run_view("fit1", withheld)["status"]
    assert s["steady_step_seconds"] is None and s["steady_withheld"] == "no interval yet"
    assert s["steady_words"] == {"train": "withheld (no interval yet)"}
    old = full_report(steady_step_seconds_by_phase={"train": 0.002, "test": None, "predict": None}, backend="jax")
    old["schema_version"] = 9
    del old["step_timing"]
    s = views.run_view("fit1", old)["status"]
    assert s["steady_basis"] == "dispatch" and "a dispatch time, not a step time" in s["steady_words"]["train"]
    assert views.summary_row("fit1", old)["steady_basis"] == "dispatch"


def test_records_past_max_records_are_counted_and_said():
    report = full_report(compilations_dropped=998, compilation_count={"train": 1000, "test": 0, "predict": 0})
    view = views.run_view("fit1", report)
    assert view["status"]["total_compilations"] == 1000 and view["status"]["compilations_listed"] == 2
    assert view["status"]["compilations_dropped"] == 998
    assert "998 more compiles" in view["messages"][0]


def test_a_newer_report_is_shown_with_a_message_and_junk_is_refused():
    report = full_report()
    report["schema_version"] = 99
    assert "newer xla_keras" in views.run_view("r", report)["messages"][0]
    with pytest.raises(ValueError, match="not an XlaMonitor report"):
        views.run_view("r", {"hello": "world"})


def test_report_data_round_trips_and_is_small():
    report = full_report()
    encoded = encode_report_data(report)
    assert decode_report_data(encoded) == json.loads(json.dumps(report))
    assert len(encoded) < len(json.dumps(report))


@pytest.mark.parametrize(
    "data, words",
    [
        (b"not gzip at all", "not gzip"),
        (gzip.compress(b"{not json", mtime=0), "not JSON"),
        (gzip.compress(b"[1, 2]", mtime=0), "JSON list"),
        (gzip.compress(b"\xff\xfe", mtime=0), "not JSON"),
        (gzip.compress(b"{}", mtime=0)[:-6], "not gzip"),  # cut short: a partially written value
        ("a str", "must be bytes"),
    ],
)
def test_malformed_report_data_is_a_value_error_that_says_what(data, words):
    with pytest.raises(ValueError, match=words):
        decode_report_data(data)


@pytest.mark.parametrize(
    "state, written, words",
    [
        ("running", {"step": 12, "wall_time": 1.0}, "written while the fit was running (at train step 12)"),
        ("interrupted", None, "Interrupted: the last fit stopped early"),
        ("finished", None, None),
        (None, None, None),
    ],
)
def test_how_complete_a_run_is_is_said(state, written, words):
    report = full_report(run_state=state, notes=["the last fit stopped early (Ctrl-C) after train step 3: ..."])
    message = views.state_message(report, written)
    assert (message is None) if words is None else words in message


def decision_dict(**overrides):
    decision = {
        "mode": "on",
        "basis": "measured",
        "why": "jit='fastest': XLA on steps are 1.50x faster",
        "default": "off",
        "medians": {"on": 0.002, "off": 0.003},
        "spreads": {"on": 0.0001, "off": 0.0002},
        "steps_measured": {"on": 24, "off": 30},
        "blocks": {"on": 3, "off": 3},
        "trial_compile_seconds": 0.4,
        "first_call_seconds": {"on": 1.2, "off": 0.7},
        "predicted_saving_seconds": 9.5,
        "expected_compiles": 1.0,
        "decided_at_step": 80,
        "steps_left": 9920,
        "switches": 5,
        "trial_steps": 80,
        "ratio": {"on_over_off": 0.667, "low": 0.6, "high": 0.7, "rounds": 3},
        "switch_steps": [14, 28],
    }
    decision.update(overrides)
    return decision


def test_the_jit_decision_card_shows_both_modes_and_the_evidence():
    report = full_report(jit_mode="fastest", jit_decision=decision_dict())
    view = views.run_view("fit1", report)["jit_decision"]
    assert (view["mode"], view["basis"], view["default"]) == ("on", "measured", "off")
    assert [(r["mode"], r["median"], r["spread"], r["steps"], r["kept"]) for r in view["rows"]] == [
        ("on", 0.002, 0.0001, 24, True),
        ("off", 0.003, 0.0002, 30, False),
    ]
    assert view["trial_compile_seconds"] == 0.4 and view["predicted_saving_seconds"] == 9.5
    assert view["ratio"]["rounds"] == 3 and view["why"].startswith("jit='fastest'")
    assert views.run_view("fit1", full_report())["jit_decision"] is None  # other modes: no card
    measuring = views.jit_decision_card({"jit_decision": decision_dict(mode=None, basis="measuring")})
    assert measuring["mode"] is None and not any(r["kept"] for r in measuring["rows"])
    revised_decision = decision_dict(mode="off", basis="compiles", revised_at_step=140)
    revised = views.jit_decision_card({"jit_decision": revised_decision})
    assert revised["revised_at_step"] == 140 and view["revised_at_step"] is None


@pytest.mark.parametrize(
    "decision, words",
    [
        ("on", "jit_decision is 'on', not an object"),
        ({"medians": {"on": "fast"}}, "jit_decision.medians['on']"),
        ({"trial_compile_seconds": [1]}, "jit_decision.trial_compile_seconds"),
    ],
)
def test_a_malformed_jit_decision_is_said_not_drawn(decision, words):
    report = full_report()
    report["jit_decision"] = decision
    with pytest.raises(ValueError, match=words.replace("[", r"\[").replace("]", r"\]")):
        views.run_view("fit1", report)


def test_the_ledger_carries_each_programs_cost_or_says_why_not():
    from xla_keras.core.program_cost import ProgramCost

    analysed = ProgramCost(1.2e6, 5.7e5, 1000, 900, 800, 500, 0, "XLA's analysis", True).to_dict()
    partial = ProgramCost(flops=3e6, source="HLO", unavailable="bytes accessed and memory: not given").to_dict()
    rows = views.ledger(
        [
            {**compile_row("train", 1, xy(8, 84)), "cost": analysed},
            {**compile_row("train", 3, xy(8, 90)), "cost": partial},
            compile_row("train", 5, xy(8, 96)),  # schema 8, or cost="off": no cost key
        ]
    )
    assert [(r["flops"], r["peak_bytes"]) for r in rows] == [(1.2e6, 1600), (3e6, None), (None, None)]
    assert [r["cost_note"] for r in rows] == ["", "bytes accessed and memory: not given", "not analysed"]


def test_the_status_strip_counts_the_modules_outside_the_steps_program():
    report = {**full_report(), "compilation_count": {"train": 7}}
    report["outside_step_compilations"] = {"train": {"count": 1, "seconds": 0.09}}
    status = views.status(report)
    assert status["outside_step_compilations"] == {"train": {"count": 1, "seconds": 0.09}}
    assert status["total_compilations"] == 7  # the initialiser's module is an XLA compile too
    assert views.status(full_report())["outside_step_compilations"] == {}
