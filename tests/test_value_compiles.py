"""Compiles a value causes, not a shape: every compile XLA makes is in the ledger, with its cause in words;
XLA's compile-time refusals go through ``on_unsupported``; JAX's compiles at a known signature carry JAX's
own reason.

Ground truth, in fresh processes (tests/value_fits.py): TensorFlow's own "Compilation of XLA executable"
log lines (``TF_CPP_VMODULE=device_compiler=1``) and XLA's dump (``--xla_dump_to``) for the compiles; the
optimizer's iterations and the weights of the same model trained without XLA, unmonitored, for the
fallbacks; TensorFlow's stderr for what it printed; JAX's own compile events (a listener of the script's,
with the step each came at) on JAX.
"""

import json
import os
import re
import sys

import forked
import numpy as np
import pytest

pytestmark = [pytest.mark.scenario, pytest.mark.slow, pytest.mark.xdist_group("test_value_compiles")]

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FITS = os.path.join(HERE, "value_fits.py")
STEPS = 20
TF_COMPILE_LINE = re.compile(r"Compilation of XLA executable time")


def _run(scenario, tmp_path_factory, **env_extra):
    dump = str(tmp_path_factory.mktemp(f"dump_{scenario}"))
    env = dict(
        os.environ,
        XLA_FLAGS=f"--xla_dump_to={dump}",
        KERAS_BACKEND="jax" if scenario == "jax" else "tensorflow",
        CUDA_VISIBLE_DEVICES="",
        PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
        **env_extra,
    )
    for key in ("TF_CPP_VMODULE", "TF_CPP_MIN_LOG_LEVEL", "TF_CPP_MAX_VLOG_LEVEL"):
        if key not in env_extra:
            env.pop(key, None)  # TensorFlow's own default log level: what a user sees
    proc = forked.run([sys.executable, FITS, dump, scenario], env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("XLA_KERAS_VALUES ")][-1]
    return json.loads(line[len("XLA_KERAS_VALUES ") :]), proc.stderr


def _segment(stderr, name):
    """What was written to stderr during fit ``name`` (between the script's markers)."""
    begin, end = f"XLA_KERAS_MARK {name} begin", f"XLA_KERAS_MARK {name} end"
    return stderr[stderr.index(begin) + len(begin) : stderr.index(end)]


def _line_of(text):
    with open(FITS) as f:
        return next(i for i, line in enumerate(f, 1) if text in line)


def _shaped(message):
    lines = message.splitlines()
    return 1 <= len(lines) <= 4 and max(map(len, lines)) <= 100


@pytest.fixture(scope="module")
def topk(tmp_path_factory):
    pytest.importorskip("tensorflow")
    return _run("topk", tmp_path_factory, TF_CPP_MIN_LOG_LEVEL="0", TF_CPP_VMODULE="device_compiler=1")


@pytest.fixture(scope="module")
def refusals(tmp_path_factory):
    pytest.importorskip("tensorflow")
    return _run("refusals", tmp_path_factory)


@pytest.fixture(scope="module")
def jax_fits(tmp_path_factory):
    pytest.importorskip("jax")
    return _run("jax", tmp_path_factory)[0]


# ------------------------------------------------------------------ a value XLA takes as a constant


def test_every_compile_tensorflow_logs_is_in_the_ledger(topk):
    out, stderr = topk
    fit = out["topk"]
    logged = len(TF_COMPILE_LINE.findall(_segment(stderr, "topk")))
    report = fit["report"]
    assert fit["iterations"] == STEPS
    assert logged == fit["dumped"] == report["compilation_count"]["train"] == STEPS  # one compile per step
    assert report["distinct_signatures"]["train"] == 1  # one input shape: the values caused the rest
    assert len(report["compilations"]) == STEPS


def test_each_compile_at_a_known_signature_names_the_value_its_layer_and_the_line(topk):
    report = topk[0]["topk"]["report"]
    causes = [c["cause"] for c in report["compilations"]]
    assert causes == ["signature"] + ["value"] * (STEPS - 1)
    why = report["compilations"][1]["why"]
    assert why.startswith("TopKV2's k in layer 'pick_k'")
    assert f"{FITS}:{_line_of('tf.math.top_k(')} in call" in why  # the user's line
    assert "input 'x'" in why and "dense" in why  # the batch and the weights the value comes from
    assert report["slow_step_count"] == 0  # a known-signature step that compiled is never slow


def test_value_compiles_open_a_storm_whose_fix_makes_the_value_static(topk):
    fit = topk[0]["topk"]
    (storm,) = fit["report"]["storms"]
    assert storm["cause"] == "value" and storm["step"] == 8  # the threshold-th compile
    fix = storm["fix"]
    assert (fix["kind"], fix["op"], fix["input"], fix["layer"]) == ("static_value", "TopKV2", "k", "pick_k")
    assert fix["inputs"] == ["x"] and fix["line"].startswith(FITS)
    (warning,) = fit["warnings"]
    assert _shaped(warning) and "compiles at known shapes" in warning.splitlines()[0]
    assert "TopKV2's k in layer 'pick_k'" in warning
    assert "compiles at known shapes" in fit["summary"]
    assert "steps 2-20" in fit["printed"] and "19 compiles" in fit["printed"]  # one ledger row for the values


# ------------------------------------------------------------------ XLA's compile-time refusals


def test_a_computed_range_falls_back_and_trains_as_without_xla(refusals):
    out, _ = refusals
    fit, reference = out["range"], out["range_reference"]
    assert fit["iterations"] == reference["iterations"] == STEPS  # no step lost, none run twice
    assert all(np.isfinite(np.array(w)).all() for w in fit["weights"])
    assert all(np.array_equal(np.array(a), np.array(b)) for a, b in zip(fit["weights"], reference["weights"]))
    report = fit["report"]
    found = report["unsupported_ops"]
    assert (found["kind"], found["input"], found["action"]) == ("constant", "limit", "fallback")
    assert [(op["op"], op["layer"]) for op in found["ops"]] == [("Range", "pick_k")]
    assert found["line"] == f"{FITS}:{_line_of('tf.range(n)')} in call"
    assert "must be a compile-time constant" in found["error"]  # TensorFlow's words, quoted
    assert report["jit_active"] is False and report["compilation_count"]["train"] == 0 and fit["dumped"] == 0
    (warning,) = fit["warnings"]
    assert _shaped(warning) and "Range's limit in layer 'pick_k'" in warning


def test_tensorflows_lines_about_a_refusal_are_kept_out_of_the_terminal(refusals):
    out, stderr = refusals
    for name in ("range", "grad"):
        said = _segment(stderr, name)
        assert "OP_REQUIRES failed" not in said and "must be a compile-time constant" not in said, said[-2000:]
        assert "Stack trace for op definition" not in said
    assert out["range"]["warnings"] and out["grad"]["warnings"]  # what the user sees instead: our 4 lines


def test_xlas_own_failure_to_compile_falls_back_naming_the_likely_value(refusals):
    fit = refusals[0]["grad"]
    assert fit["iterations"] == STEPS
    found = fit["report"]["unsupported_ops"]
    assert found["kind"] == "compile" and "RET_CHECK" in found["error"]  # XLA's own words, quoted
    assert [(op["op"], op["layer"]) for op in found["ops"]] == [("TopKV2", "pick_k")]  # the value it computes
    assert found["line"] == f"{FITS}:{_line_of('tf.math.top_k(')} in call"
    assert fit["report"]["jit_active"] is False
    (warning,) = fit["warnings"]
    assert _shaped(warning)


# ------------------------------------------------------------------ JAX: compiles at a known signature


def test_jax_a_changed_config_compiles_again_and_says_so_in_jaxs_words(jax_fits):
    fit = jax_fits["context"]
    report = fit["report"]
    records = report["compilations"]
    assert [c["step"] for c in records] == fit["jax_compiles_at"] == [1, 11, 21]  # JAX's own events
    assert report["compilation_count"]["train"] == 3 and report["distinct_signatures"]["train"] == 1
    assert [c["cause"] for c in records] == ["signature", "context", "context"]
    assert "jax_default_matmul_precision differs: now highest" in records[1]["why"]
    assert records[1]["why"].startswith("Tracing context doesn't match")  # JAX's own explanation


def test_jax_batches_placed_differently_compile_again_and_each_compile_is_in_the_ledger(jax_fits):
    fit = jax_fits["placement"]
    records = fit["report"]["compilations"]
    assert fit["jax_compiles_at"] and [c["step"] for c in records] == fit["jax_compiles_at"]
    assert fit["report"]["distinct_signatures"]["train"] == 1
    assert records[0]["cause"] == "signature"
    later = records[1:]
    assert later and all(c["cause"] == "placement" for c in later)
    assert any("committed jax.Array" in c["why"] for c in later)
