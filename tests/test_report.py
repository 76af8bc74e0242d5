"""Unit tests for xla_keras.report (pure): to_dict keys, JSON round trip, rendering."""

import json
import math

import pytest

from xla_keras.core.program_cost import ProgramCost, phase_rates
from xla_keras.core.signatures import Leaf
from xla_keras.report.model import Compilation, SlowStep, XlaReport
from xla_keras.storms.budget import PhaseAdvice
from xla_keras.storms.detection import Storm

# The to_dict() keys are a contract (docs/report-schema.md): written out here so a rename fails.
COMPILATION_KEYS = [
    "phase",
    "step",
    "signature",
    "seconds",
    "source",
    "cached",
    "step_seconds",
    "traced",
    "call_batches",
    "call_compiles",
    "last_batch",
    "estimated_because",
    "cause",  # schema 13
    "why",  # schema 13
    "cost",  # schema 9 (the cost card)
    "outside_step",  # a one-off program's module (TensorFlow's variable initialiser), not the step's
    "precompiled",  # schema 13: compiled before the phase's first step
]
SLOW_STEP_KEYS = ["phase", "step", "seconds", "steady_seconds", "signature", "basis"]  # basis: schema 10
SLOW_STEP_KEYS += ["where", "input_seconds", "between_seconds"]  # schema 13
REPORT_KEYS = [
    "jit_mode",
    "jit_active",
    "jit_reason",
    "jit_fix",
    "unsupported_ops",  # schema 12
    "coverage",  # schema 12
    "compilations",
    "compilation_count",
    "compilations_dropped",
    "distinct_signatures",
    "storms",
    "fallback",
    "steps",
    "steady_step_seconds",
    "steady_step_seconds_by_phase",
    "steady_step_counts",
    "step_timing",  # schema 10
    "compile_seconds",
    "wall_seconds",
    "compile_share",
    "slow_steps",
    "slow_step_count",
    "break_even_steps",
    "cache_saved_seconds",
    "probe",
    "traces",
    "notes",
    "log_dir",
    "versions",
    "schema_version",  # 0.2 (schema 2) added it: keys are only ever added
    "run_state",  # schema 3
    "backend",
    "other_compilations",  # schema 4 (Keras's JAX backend)
    "advice",  # schema 5 (compile budget)
    "jit_decision",  # schema 6 (jit="fastest")
    "processes",  # schema 8 (several processes: each one's counts)
    "costs",  # schema 9 (the cost card: achieved rates per phase)
    "waits",  # schema 13 (the input pipeline's wait, runs' starts)
    "own_seconds",  # schema 13 (the monitor's own work)
    "outside_step_compilations",  # modules of one-off programs, per phase
    "precompile",  # schema 13 (what each phase compiled before its first step, and after)
]
SIGNATURE_ITEM_KEYS = ["path", "dtype", "shape"]


def sig(batch, length=None):
    return (Leaf("x/tokens", "int32", (batch, length)), Leaf("y", "float32", (batch, 1)))


def compilation(step=1, batch=64, seconds=0.335, source="profiler", phase="train", **kw):
    return Compilation(phase, step, sig(batch, 5), seconds, source, **kw)


PROGRAM_COST = ProgramCost(1.2e6, 5.7e5, 109724, 101544, 101404, 50308, 0, "XLA's cost and memory analysis", True)


def full_report(**overrides):
    fields = dict(
        jit_mode="on",
        jit_active=True,
        jit_reason="jit_compile=True on the train function",
        compilations=[
            compilation(1, 64, 0.335, step_seconds=0.41, traced=True, cost=PROGRAM_COST),
            compilation(9, 40, 0.25, "timing", step_seconds=0.26),
            compilation(1, 64, 0.125, phase="test", cached=True),
        ],
        compilation_count={"train": 2, "test": 1, "predict": 0},
        compilations_dropped=0,
        distinct_signatures={"train": 2, "test": 1, "predict": 0},
        storms=[Storm("train", 30, 8, [], "pad", {"kind": "drop_remainder"})],
        steps={"train": 20, "test": 4, "predict": 0},
        steady_step_seconds=0.0125,
        steady_step_seconds_by_phase={"train": 0.0125, "test": 0.004, "predict": None},
        compile_seconds=0.71,
        wall_seconds=2.0,
        compile_share=0.25,
        slow_steps=[SlowStep("train", 14, 0.5, 0.0125, sig(64, 5))],
        slow_step_count=1,
        break_even_steps=42.0,
        cache_saved_seconds=None,
        probe="profiler",
        notes=["first note", "second note"],
        log_dir="/tmp/logs/xla",
        versions={"tensorflow": "2.21.0", "keras": "3.15.1"},
        costs={"train": phase_rates(PROGRAM_COST, 0.0125, 14, (1e12, "XlaMonitor(peak_flops=...)"))},
    )
    fields.update(overrides)
    return XlaReport(**fields)


# ------------------------------------------------------------------ to_dict / JSON


def test_compilation_to_dict_keys_and_values():
    c = compilation(3, 64, 0.5, "timing", step_seconds=0.6, traced=True, cached=True)
    d = c.to_dict()
    assert sorted(d) == sorted(COMPILATION_KEYS)
    assert d["signature"] == [
        {"path": "x/tokens", "dtype": "int32", "shape": [64, 5]},
        {"path": "y", "dtype": "float32", "shape": [64, 1]},
    ]
    assert (d["phase"], d["step"], d["seconds"], d["source"]) == ("train", 3, 0.5, "timing")
    assert (d["cached"], d["step_seconds"], d["traced"]) == (True, 0.6, True)


def test_slow_step_to_dict_keys():
    d = SlowStep("test", 7, 0.5, 0.01, sig(8)).to_dict()
    assert sorted(d) == sorted(SLOW_STEP_KEYS)
    assert [sorted(item) for item in d["signature"]] == [sorted(SIGNATURE_ITEM_KEYS)] * 2


def test_report_to_dict_keys():
    assert sorted(full_report().to_dict()) == sorted(REPORT_KEYS)
    assert sorted(XlaReport().to_dict()) == sorted(REPORT_KEYS)


def test_default_report_is_json_able_and_has_all_phases():
    d = json.loads(json.dumps(XlaReport().to_dict(), allow_nan=False))
    for key in ("compilation_count", "distinct_signatures", "steps", "steady_step_seconds_by_phase"):
        assert sorted(d[key]) == ["predict", "test", "train"]
    assert d["compilations"] == [] and d["jit_mode"] == "keep" and d["jit_active"] is None


@pytest.mark.parametrize(
    "obj",
    [
        compilation(),
        SlowStep("train", 2, 0.5, 0.01, sig(8)),
        full_report(),
    ],
)
def test_to_dict_is_json_serialisable(obj):
    text = json.dumps(obj.to_dict(), allow_nan=False)
    assert json.loads(text) == obj.to_dict()


def test_compilation_round_trip():
    c = compilation(5, 17, 0.2, "timing", step_seconds=0.3, traced=True, cached=True)
    back = Compilation.from_dict(json.loads(json.dumps(c.to_dict())))
    assert back == c
    assert isinstance(back.signature, tuple) and isinstance(back.signature[0].shape, tuple)


def test_compilation_from_dict_defaults_optional_fields():
    d = compilation().to_dict()
    for key in ("cached", "step_seconds", "traced"):
        del d[key]
    back = Compilation.from_dict(d)
    assert (back.cached, back.step_seconds, back.traced) == (False, None, False)


def test_slow_step_round_trip():
    s = SlowStep("predict", 11, 0.75, 0.005, sig(3, None))
    assert SlowStep.from_dict(json.loads(json.dumps(s.to_dict()))) == s


def test_report_round_trip_through_json():
    report = full_report()
    text = report.to_json()
    back = XlaReport.from_json(text)
    assert back == report
    assert back.to_json() == text
    assert isinstance(back.compilations[0], Compilation)
    assert isinstance(back.slow_steps[0], SlowStep)


def test_report_round_trip_through_dict():
    report = full_report()
    assert XlaReport.from_dict(report.to_dict()) == report


def test_from_dict_ignores_unknown_keys_and_defaults_missing_ones():
    back = XlaReport.from_dict({"jit_mode": "off", "some_future_key": [1, 2]})
    assert back.jit_mode == "off"
    assert back.compilations == [] and back.notes == []
    assert back.steps == {"train": 0, "test": 0, "predict": 0}


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_non_finite_break_even_serialises_as_none(value):
    report = full_report(break_even_steps=value)
    d = report.to_dict()
    assert d["break_even_steps"] is None
    json.dumps(d, allow_nan=False)
    assert json.loads(report.to_json())["break_even_steps"] is None


def test_finite_break_even_is_kept():
    assert full_report(break_even_steps=12.5).to_dict()["break_even_steps"] == 12.5


def test_to_dict_does_not_alias_report_state():
    report = full_report()
    d = report.to_dict()
    d["notes"].append("mutated")
    d["steps"]["train"] = 999
    assert report.notes == ["first note", "second note"]
    assert report.steps["train"] == 20


def test_total_compilations():
    assert full_report().total_compilations == 3
    assert XlaReport().total_compilations == 0


# ------------------------------------------------------------------ rendering


def lines_of(report):
    return str(report).splitlines()


def line_starting(report, prefix):
    matches = [ln for ln in lines_of(report) if ln.strip().startswith(prefix)]
    assert len(matches) == 1, str(report)
    return matches[0]


@pytest.mark.parametrize("mode", ["keep", "on", "off", "autoclustering"])
def test_render_shows_jit_mode(mode):
    assert line_starting(full_report(jit_mode=mode), "jit requested").split(":")[1].split()[0] == mode


@pytest.mark.parametrize("active, word", [(True, "yes"), (False, "NO"), (None, "unknown")])
def test_render_shows_whether_xla_is_active(active, word):
    line = line_starting(full_report(jit_active=active), "jit requested")
    assert line.endswith(f"XLA active: {word}")


def test_render_shows_reason():
    assert "jit_compile=True on the train function" in line_starting(full_report(), "why")
    assert not any(ln.strip().startswith("why") for ln in lines_of(full_report(jit_reason="")))


def test_render_per_phase_compile_counts():
    line = line_starting(full_report(), "compiles")
    # train: 0.335 + 0.25 s; test: 0.125 s; predict ran no steps so it is not listed.
    assert "train 2 (585 ms), test 1 (125 ms)" in line
    assert "predict" not in line
    assert line.endswith("[measured by profiler/timing]")


def test_render_no_phases_ran():
    report = XlaReport()
    assert line_starting(report, "compiles").endswith(": none")
    assert line_starting(report, "signatures").endswith(": none")
    assert line_starting(report, "steady step").endswith(": n/a")
    assert not any("compiled for" in ln for ln in lines_of(report))


def test_render_signatures_compile_time_and_steady_step():
    report = full_report()
    assert line_starting(report, "signatures").endswith(": train 2, test 1")
    assert line_starting(report, "compile time").endswith(": 710 ms = 25% of 2.00 s monitored")
    assert line_starting(report, "steady step").endswith(": train 12.5 ms, test 4 ms")


@pytest.mark.parametrize("value, expected", [(42.0, "42 steps"), (math.inf, "inf steps")])
def test_render_break_even(value, expected):
    assert line_starting(full_report(break_even_steps=value), "break-even").endswith(expected)


def test_render_without_break_even():
    assert not any("break-even" in ln for ln in lines_of(full_report(break_even_steps=None)))


def test_render_slow_steps_worst():
    slow = [SlowStep("train", 14, 0.5, 0.0125, sig(64)), SlowStep("test", 3, 1.5, 0.004, sig(8))]
    line = line_starting(full_report(slow_steps=slow, slow_step_count=5), "slow steps")
    assert ": 5 known-signature steps" in line
    assert line.endswith("(worst: test step 3, 1.50 s)")


def test_render_timing_records_are_marked_as_estimates():
    report = full_report()
    profiler_line = line_starting(report, "train step 1:")
    timing_line = line_starting(report, "train step 9:")
    assert timing_line.endswith("250 ms (estimated from step time)")
    assert profiler_line.endswith("335 ms")
    assert "estimated" not in profiler_line
    assert "x/tokens:int32[40,5] y:float32[40,1]" in timing_line


@pytest.mark.parametrize(
    "records, count, more",
    [
        (3, 3, None),
        (8, 8, None),
        (9, 9, 1),
        (12, 12, 4),
        (8, 20, 12),  # detailed records capped at 8, exact count 20
    ],
)
def test_render_caps_listed_compilations_at_eight(records, count, more):
    comps = [compilation(step=i + 1, batch=i + 1) for i in range(records)]
    report = full_report(compilations=comps, compilation_count={"train": count, "test": 0, "predict": 0})
    listed = [ln for ln in lines_of(report) if ln.strip().startswith("train step ")]
    assert len(listed) == min(records, 8)
    more_lines = [ln.strip() for ln in lines_of(report) if "more" in ln]
    assert more_lines == ([] if more is None else [f"... {more} more"])


def test_render_notes_and_log_dir():
    lines = [ln.strip() for ln in lines_of(full_report())]
    assert "note: first note" in lines and "note: second note" in lines
    assert lines.index("note: first note") < lines.index("note: second note")
    assert lines[-1] == "logs            : tensorboard --logdir /tmp/logs/xla"


def test_render_without_log_dir_has_no_hint():
    assert "tensorboard --logdir" not in str(full_report(log_dir=None))


def test_str_is_render_and_starts_with_title():
    assert lines_of(full_report())[0] == "XLA report (xla_keras)"


# ------------------------------------------------------------------ the versioned contract


def test_reports_carry_their_schema_version_and_parse_back():
    from xla_keras.report.model import SCHEMA_VERSION
    from xla_keras.report.schema import parse_report

    report = full_report()
    data = report.to_dict()
    assert data["schema_version"] == SCHEMA_VERSION == 13
    parsed = parse_report(json.loads(json.dumps(data)))
    assert parsed.schema_version == 13 and not parsed.newer and parsed.message is None
    assert parsed.report.to_dict() == data


def test_a_0_1_report_without_schema_version_is_read_as_version_1():
    from xla_keras.report.schema import parse_report

    data = full_report().to_dict()
    del data["schema_version"]
    for c in data["compilations"]:
        c.pop("call_batches"), c.pop("call_compiles")  # written by an early 0.1
    parsed = parse_report(data)
    assert parsed.schema_version == 1 and not parsed.newer
    assert [c.call_batches for c in parsed.report.compilations] == [1] * len(data["compilations"])


@pytest.mark.parametrize(
    "backend, basis, slow_basis", [("tensorflow", "per_step", "step"), ("jax", "dispatch", "host")]
)
def test_a_schema_9_report_says_how_its_step_times_were_measured(backend, basis, slow_basis):
    """Before schema 10 a JAX report timed steps start to start under asynchronous dispatch: its steady step
    is read as a dispatch time, said so wherever it is shown, never as a step time."""
    from xla_keras.report.figures import dispatch_timed, steady_words
    from xla_keras.report.schema import parse_report

    data = full_report().to_dict()
    data.update(schema_version=9, backend=backend)
    del data["step_timing"]
    for slow in data["slow_steps"]:
        del slow["basis"]
    report = parse_report(data).report
    assert report.step_timing["train"] == {
        "basis": basis,
        "steps": data["steady_step_counts"]["train"],
        "intervals": 0,
        "withheld": None,
    }
    assert {s.basis for s in report.slow_steps} == {slow_basis}
    assert dispatch_timed(report) is (backend == "jax")
    words = steady_words(report, "train")
    assert ("a dispatch time, not a step time" in words) is (backend == "jax")
    assert ("a dispatch time" in str(report)) is (backend == "jax")


def test_a_newer_report_is_read_for_the_keys_this_version_knows_and_says_so():
    from xla_keras.report.model import SCHEMA_VERSION
    from xla_keras.report.schema import parse_report

    data = full_report().to_dict()
    data["schema_version"] = SCHEMA_VERSION + 1
    data["a_key_from_the_future"] = {"x": 1}
    data["compilations"][0]["also_from_the_future"] = True
    parsed = parse_report(data)
    assert parsed.newer and "newer xla_keras" in parsed.message
    assert parsed.report.compilation_count == full_report().compilation_count


@pytest.mark.parametrize(
    "data, words",
    [
        ([1, 2], "not an XlaMonitor report"),
        ({"hello": 1}, "not an XlaMonitor report"),
        ({"jit_mode": "on", "schema_version": "2"}, "schema_version must be an int"),
    ],
)
def test_what_is_not_a_report_is_named(data, words):
    from xla_keras.report.schema import parse_report

    with pytest.raises(ValueError, match=words):
        parse_report(data)


def test_compilation_from_dict_reads_by_key_in_any_order():
    c = full_report().compilations[0]
    shuffled = dict(reversed(list(c.to_dict().items())))
    assert Compilation.from_dict(shuffled) == c


def _long_report():
    varying = [{"path": "x/tokens", "axis": 1, "min": 3, "max": 59, "n_values": 41}]
    advice = "Fix: batch to a fixed size and pad 'x/tokens' axis 1 to [64]. " + "Figures measured. " * 60
    budget = PhaseAdvice("test", 3, 1.4, 0.9, 6.0, 0.15, 0.1, varying, advice, {"kind": "pad_to_lengths"})
    return full_report(
        storms=[Storm("train", 30, 8, varying, advice, {"kind": "pad_to_lengths"}, 8, 4.0, action="fallback")],
        advice=[budget],
        notes=["short note", "a long note " * 40],
        compilations=[compilation(step=1, batch=64 * 1024 * 1024)] * 2,
    )


def test_the_summary_fits_100_columns_and_trims_advice_to_headline_and_fix():
    report = _long_report()
    lines = str(report).splitlines()
    assert max(map(len, lines)) <= 100, [ln for ln in lines if len(ln) > 100]
    text = "\n".join(lines)
    assert "Figures measured" not in text  # the long advice stays in details()
    flat = " ".join(text.split())
    assert (
        "STORM (train, step 30, fallback): 8 new input shapes; input 'x/tokens' axis 1 varies (3..59, 41 values) "
        "fix: ds = xla_keras.data.apply_fix(ds, report.storms[0].fix)"
    ) in flat
    assert (
        "ADVICE (test, fit 1): 3 compiles; those beyond the first took 900 ms = 15% of the phase (budget 10%); "
        "input 'x/tokens' axis 1 varies (3..59, 41 values) fix: ds = xla_keras.data.apply_fix(ds, report.advice[0].fix)"
    ) in flat
    notes = [i for i, ln in enumerate(lines) if ln.strip().startswith("note: a long note")]
    assert len(notes) == 1 and lines[notes[0] + 1].endswith(" …")  # 2 lines, marked as cut
    assert line_starting(report, "details").endswith(": report.details(), xla-keras report --full /tmp/logs/xla")


def test_details_keeps_every_advice_and_note_whole_in_100_columns():
    report = _long_report()
    text = report.details()
    assert max(map(len, text.splitlines())) <= 100
    flat = " ".join(text.split())
    for whole in (report.storms[0].advice, report.advice[0].advice, report.notes[1]):
        assert " ".join(whole.split()) in flat
    assert "details" not in flat and "…" not in flat
    assert report.to_dict() == XlaReport.from_dict(report.to_dict()).to_dict()  # unchanged by the rendering


def test_the_end_of_fit_summary_is_12_lines_with_one_line_per_finding():
    report = _long_report()
    report.fallback = {"phase": "train", "step": 30, "reason": "storm"}
    report.slow_step_count = 2
    lines = report.summary().splitlines()
    assert len(lines) <= 12 and max(map(len, lines)) <= 100, lines
    assert lines[0].startswith(f"xla_keras: XLA ran until the storm fallback (jit={report.jit_mode!r}); compiles: ")
    assert lines[1].startswith("  compile time : ") and lines[2].startswith("  steady step  : ")
    assert lines[3:7] == [
        "  STORM (train, step 30): 8 new input shapes; input 'x/tokens' axis 1 varies (3..59, 41 values)",
        "  ADVICE (test, fit 1): recompiles took 900 ms = 15% of the phase; input 'x/tokens' axis 1 varies",
        "  fallback     : XLA off from train step 30",
        "  slow steps   : 2 known-signature steps far above the steady step",
    ]
    assert lines[7] == "  fix          : ds = xla_keras.data.apply_fix(ds, monitor.report.storms[0].fix)"
    assert lines[-2] == "  notes        : 2 (print(monitor.report))"
    assert lines[-1] == "  more         : print(monitor.report), xla-keras report /tmp/logs/xla, the XLA tab"


def test_the_end_of_fit_summary_keeps_12_lines_with_many_findings():
    report = _long_report()
    report.storms = report.storms * 20
    lines = report.summary(where="m.report").splitlines()
    assert len(lines) == 12 and max(map(len, lines)) <= 100
    total = len(report.storms) + len(report.advice) + bool(report.slow_step_count)  # no fallback, no fastest
    shown = sum(ln.startswith(("  STORM", "  ADVICE", "  slow steps")) for ln in lines)
    assert lines[-4] == f"  + {total - shown} more findings: print(m.report)"
    assert lines[-3] == "  fix          : ds = xla_keras.data.apply_fix(ds, m.report.storms[0].fix)"


# A jit_fix of a report written before its code was laid out in 96 columns: lines past 100 with the indent.
OLD_FIX = "\n".join(
    [
        "# xla_keras: Keras runs no step of this model with XLA while a_long_lookup_name (StringLookup) is in it",
        'a_long_lookup_name = model.get_layer("a_long_lookup_name")',
        'model = keras.Model({**model.input, "a_long_input_key": a_long_lookup_name.output}, model.output)',
        'dataset = dataset.map(lambda x, y: ({**x, "a_long_input_key": a_long_lookup_name(x["a_long_input_key"])}, y))',
        'name = "' + "a string literal longer than the line itself, continued inside it; " * 3 + '"',
        "model.compile(...)  # your compile arguments again; XLA now compiles the step",
    ]
)


def _printed_code(text):
    """The code under "fix (code)", as the user copies it (the report's indent of 4 taken off)."""
    lines = text.splitlines()
    start = lines.index("  fix (code)      :") + 1
    end = next(i for i in range(start, len(lines)) if lines[i] and not lines[i].startswith("    "))
    return "\n".join(line[4:] for line in lines[start:end])


@pytest.mark.parametrize("render", [str, XlaReport.details], ids=["str", "details"])
def test_the_jit_fix_is_printed_whole_in_100_columns_and_runs_the_same(render):
    import ast

    report = XlaReport(jit_mode="on", jit_active=False, jit_reason="refused", jit_fix=OLD_FIX)
    text = render(report)
    assert max(map(len, text.splitlines())) <= 100 and "too long" not in text
    printed = _printed_code(text)
    assert ast.dump(ast.parse(printed)) == ast.dump(ast.parse(OLD_FIX))  # the same program, laid out
    said = " ".join(OLD_FIX.splitlines()[0].split()[1:])
    assert said in " ".join(word for word in printed.split() if word != "#")  # its comment, wrapped as comments


def test_code_within_keeps_the_program_and_the_width():
    import ast

    from xla_keras.core.messages import code_within

    cases = [
        'x = model.get_layer("' + "a" * 150 + '")  # a comment that is also rather long ' + "w " * 40,
        'print("ab\\n\\u00e9cd" * 3, "' + "q\\\\" * 80 + '")',  # escapes: never split
        'print("' + "\\u00e9\\N{BULLET}\\x41" * 20 + '")',
        "value = some_function(argument_one, argument_two, argument_three, argument_four, argument_five, six)",
        "    # " + "word " * 40,
        'def f(x):\n    """' + "doc " * 40 + '"""\n    return {**x, "' + "k" * 40 + '": layer(x["' + "k" * 40 + '"])}',
    ]
    for code in cases:
        for width in (50, 96):
            lines = code_within(code, width)
            assert max(map(len, lines)) <= width, (code, width)
            assert ast.dump(ast.parse("\n".join(lines))) == ast.dump(ast.parse(code)), (code, width)
    assert code_within("a = 1\n\nb = 2") == ["a = 1", "", "b = 2"]  # what fits is left as it is
