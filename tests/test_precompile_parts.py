"""Precompile's parts, driven directly (no fit): its arguments, the shape set read from each source, the
ledger and the session's records, and the words that show it. The fits, against XLA's dump, are in
tests/test_precompile.py."""

import json
from typing import Tuple

import pytest

from xla_keras.config import MonitorConfig
from xla_keras.core.precompile import (
    MAX_SIGNATURES,
    from_applied,
    previous_signatures,
    resolve,
    signatures_in_report,
    validate_precompile,
)
from xla_keras.core.signatures import Leaf, to_jsonable
from xla_keras.core.types import CompileObservation, Precompiled
from xla_keras.jit.modes import JitState, ProbeFacts
from xla_keras.report.figures import precompile_words
from xla_keras.report.ledger_rows import ledger_rows, steps_words
from xla_keras.report.render import summary
from xla_keras.session.build import ReportContext, build_report
from xla_keras.session.ledger import CompileLedger
from xla_keras.session.session import Session
from xla_keras.storms.fixes import AppliedLengths

ON = JitState("on", active=True, reason="jit_compile=True")


class Spec:  # what keras.InputSpec / tf.TensorSpec / jax.ShapeDtypeStruct have in common
    def __init__(self, shape: Tuple, dtype: str):
        self.shape, self.dtype = shape, dtype


def sig(rows, length):
    return (Leaf("x", "int32", (rows, length)), Leaf("y", "float32", (rows,)))


def specs(*lengths, rows=16):
    return [(Spec((rows, n), "int32"), Spec((rows,), "float32")) for n in lengths]


# ------------------------------------------------------------------ the arguments


def test_precompile_takes_none_auto_a_path_or_specs(tmp_path):
    assert MonitorConfig(precompile=None).precompile is None
    assert MonitorConfig(precompile="auto").precompile == "auto"
    assert MonitorConfig(precompile=tmp_path).precompile == str(tmp_path)
    assert (
        MonitorConfig(precompile="~/logs").precompile.endswith("/logs")
        and "~" not in MonitorConfig(precompile="~/logs").precompile
    )
    assert MonitorConfig(precompile=specs(8, 16, 8)).precompile == (sig(16, 8), sig(16, 16))  # each shape once


@pytest.mark.parametrize(
    "value, words",
    [
        (3, "precompile must be None, 'auto', a path"),
        ([], "precompile must be None, 'auto', a path"),
        ([(Spec((None, 8), "int32"),)], "unknown dim (x:int32[?,8])"),
        (specs(*range(1, MAX_SIGNATURES + 2)), f"more than {MAX_SIGNATURES}"),
    ],
)
def test_bad_precompile_values_name_the_choices(value, words):
    with pytest.raises(ValueError, match=None) as caught:
        MonitorConfig(precompile=value)
    assert words in str(caught.value)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"on_new_signature": "stop"}, "on_new_signature must be one of 'warn', 'raise'; got 'stop'"),
        ({"precompile_threads": 0}, "precompile_threads must be an int >= 1 or None (the machine's cores); got 0"),
        ({"precompile_threads": True}, "precompile_threads must be an int >= 1"),
    ],
)
def test_bad_on_new_signature_and_threads_name_the_choices(kwargs, words):
    with pytest.raises(ValueError) as caught:
        MonitorConfig(**kwargs)
    assert words in str(caught.value)


def test_validate_precompile_reads_numpy_arrays_as_specs():
    np = pytest.importorskip("numpy")
    batch = (np.zeros((4, 7), np.int32), np.zeros((4,), np.float32))
    assert validate_precompile([batch]) == ((Leaf("x", "int32", (4, 7)), Leaf("y", "float32", (4,))),)


# ------------------------------------------------------------------ the shape set


def test_specs_that_do_not_match_the_batches_are_left_out_with_the_reason():
    given = validate_precompile(specs(8, 16) + [(Spec((16, 8), "float32"), Spec((16,), "float32"))])
    found = resolve(given, "train", sig(16, 32))
    assert found.signatures == (sig(16, 8), sig(16, 16))
    assert found.source == "the 3 specs given"
    assert found.left_out == ("spec x:float32[16,8] y:float32[16] does not match the batches "
                              "(x:int32 rank 2, y:float32 rank 1)",)  # fmt: skip


def _report(path, records):
    path.write_text(json.dumps({"compilations": records}))
    return str(path)


def test_a_saved_report_gives_its_phase_signatures_once_each_without_one_off_programs(tmp_path):
    def record(phase, signature, **extra):
        return {"phase": phase, "step": 1, "signature": to_jsonable(signature), **extra}

    records = [
        record("train", sig(16, 8)),
        record("train", sig(16, 8)),  # a value compile at a known signature: once in the set
        record("train", sig(16, 8), outside_step="initialize_variables"),
        record("test", sig(4, 8)),
        record("train", sig(16, 24)),
    ]
    path = _report(tmp_path / "xla_report.json", records)
    assert signatures_in_report(path, "train") == [sig(16, 8), sig(16, 24)]
    assert signatures_in_report(str(tmp_path), "test") == [sig(4, 8)]  # a log dir: its xla_report.json
    found = resolve(str(tmp_path), "train", sig(16, 99))
    assert found.signatures == (sig(16, 8), sig(16, 24)) and str(tmp_path) in found.source
    unreadable = resolve(str(tmp_path / "missing.json"), "train", sig(16, 8))
    assert unreadable.signatures == () and "cannot be read" in unreadable.source


def test_auto_prefers_the_applied_fix_then_the_log_dirs_last_report_then_says_why_not(tmp_path):
    applied = [AppliedLengths("bucket_by_length", (("x", 1, (8, 16, 32)),))]
    found = resolve("auto", "train", sig(16, 16), applied, None, None)
    assert found.signatures == (sig(16, 8), sig(16, 16), sig(16, 32))
    assert found.source == "the bucket_by_length fix applied to the data"
    # The first batch at none of the fix's lengths: not this data; the log dir's report then.
    _report(tmp_path / "xla_report.json", [{"phase": "train", "signature": to_jsonable(sig(16, 40))}])
    previous = previous_signatures(str(tmp_path))
    found = resolve("auto", "train", sig(16, 12), applied, previous, str(tmp_path))
    assert found.signatures == (sig(16, 40),) and found.source == f"the last report in {tmp_path}"
    nothing = resolve("auto", "test", sig(16, 12), applied, previous, str(tmp_path))
    assert nothing.signatures == () and "holds no test signature" in nothing.source
    empty = resolve("auto", "train", sig(16, 12), (), None, None)
    assert empty.signatures == () and "precompile='auto' takes the shapes of either" in empty.source
    assert previous_signatures(str(tmp_path / "none")) is None


def test_targets_sharing_lengths_take_them_together_and_others_multiply():
    template = (Leaf("x/tokens", "int32", (8, 16)), Leaf("x/mask", "int32", (8, 16)), Leaf("y", "float32", (8,)))
    together = from_applied([("pad_to_lengths", (("x/tokens", 1, (16, 32)), ("x/mask", 1, (16, 32))))], template)
    assert [tuple(leaf.shape for leaf in s) for s in together.signatures] == [
        ((8, 16), (8, 16), (8,)),
        ((8, 32), (8, 32), (8,)),
    ]
    apart = from_applied([("pad_to_lengths", (("x/tokens", 1, (16, 32)), ("x/mask", 1, (16, 24))))], template)
    assert len(apart.signatures) == 4
    assert from_applied([("pad_to_lengths", (("x/other", 1, (16,)),))], template) is None


# ------------------------------------------------------------------ the ledger and the session


def test_a_precompiled_signature_is_not_new_and_its_first_batch_is_probed_once():
    ledger = CompileLedger()
    ledger.set_function("train", "f")
    ledger.precompiled("train", sig(16, 8))
    assert ledger.observe("train", sig(16, 8)) == (False, True) and ledger.last_ahead
    assert ledger.observe("train", sig(16, 8)) == (False, False) and not ledger.last_ahead
    assert ledger.observe("train", sig(16, 9))[0] is True
    ledger.set_function("train", "g")  # a rebuilt function's cache holds none of them
    assert ledger.observe("train", sig(16, 8))[0] is True


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_the_session_records_the_precompile_at_step_0_and_counts_each_compile_after_it():
    clock = Clock()
    s = Session(MonitorConfig(log_dir=None), clock=clock)
    s.function_installed("train", None, "f", 1, False, True)
    results = [Precompiled(sig(16, 8), 1.5, "jax"), Precompiled(sig(16, 16), 0.2, "jax", cached=True),
               Precompiled(sig(16, 24), 0.0, "jax", error="XlaRuntimeError: boom")]  # fmt: skip
    facts = {"source": "the 3 specs given", "left_out": [], "threads": 2, "withheld": None}
    outcome = s.precompiled("train", results, facts, 1.6)
    assert [(c.step, c.precompiled, c.cached) for c in outcome.compiles] == [(0, True, False), (0, True, True)]
    assert s.phases["train"].compile_count == 2
    plan = s.call_began("train", [sig(16, 8)], ON)
    assert plan.new == () and plan.probe  # precompiled: not new, its first batch probed (a compile there is seen)
    s.call_observed("train", None)
    clock.now += 0.01
    s.call_ended("train", ON)
    s.call_began("train", [sig(16, 24)], ON)  # the failed one: new, compiles in the loop
    s.call_observed("train", CompileObservation((0.9,), "jax"))
    clock.now += 1.0
    missed = s.compiled_in_loop("train", s.call_ended("train", ON).compiles)
    assert [(c.step, c.cause) for c in missed] == [(2, "signature")]
    report = build_report(s.snapshot(), ReportContext("on", ON, ProbeFacts(used=True), backend="jax"))
    facts = report.precompile["train"]
    assert (facts["signatures"], facts["requested"], facts["cached"], facts["in_loop"]) == (2, 3, 1, 1)
    assert facts["failed"] == ["x:int32[16,24] y:float32[16]: XlaRuntimeError: boom"]
    assert facts["missed"] == [{"step": 2, "signature": "x:int32[16,24] y:float32[16]", "cause": "signature",
                                "why": None}]  # fmt: skip
    assert precompile_words(report) == (
        "train 2 signatures in 1.60 s on 2 threads, 1 from the cache before step 1; 1 compile in the loop"
    )
    assert "  precompiled  : train 2 signatures" in summary(report)
    rows = ledger_rows([c.to_dict() for c in report.compilations])
    assert [steps_words(r) for r in rows] == ["precompiled", "precompiled", "step 2"]
    assert report.to_dict()["compilations"][0]["precompiled"] is True


def test_a_withheld_precompile_says_why_and_counts_nothing_after_it():
    s = Session(MonitorConfig(log_dir=None), clock=Clock())
    facts = {"source": "precompile=None", "left_out": [], "threads": 0, "withheld": "XLA does not compile the step"}
    s.precompiled("train", (), facts, 0.0)
    assert s.compiled_in_loop("train", []) == []
    report = build_report(s.snapshot(), ReportContext("on", ON, ProbeFacts(used=True)))
    assert precompile_words(report) == "train none (XLA does not compile the step)"


def test_processes_compare_their_sets_by_a_digest_that_ignores_order_and_fits_a_float32():
    from xla_keras.callback.precompile import set_digest
    from xla_keras.core.signatures import Leaf

    a, b, c = ((Leaf("x", "float32", (8, n, 4)),) for n in (4, 6, 8))
    assert set_digest([a, b]) == set_digest([b, a]) != set_digest([a, c])
    assert 0 <= set_digest([a, b, c]) < 2**24  # exact as float32 through the gather
