"""Precompile: a bucketed pipeline's shapes compiled before step 1, then no compile in the loop.

Ground truth, in fresh processes (tests/precompile_fits.py), on both backends: XLA's dump (the step's module
files, their times against the end of step 1 by a callback's wall clock) for the compiles; the pipeline
iterated for the shapes it feeds; the weights and ``optimizer.iterations`` of the same fit without
precompile (same seeds) for "nothing trained"; JAX's own compile events (a listener of the script's) and
XLA's dump for what the persistent cache served in a second process. In process: the error and the warning
of a compile after the precompile, ``expect_compiles(after_warmup=0)``, validation, and what is withheld.
"""

import json
import os
import sys
import warnings

import forked
import numpy as np
import pytest

pytestmark = [pytest.mark.slow]

HERE = os.path.dirname(os.path.abspath(__file__))
FITS = os.path.join(HERE, "precompile_fits.py")
BACKENDS = [
    pytest.param("tensorflow", marks=pytest.mark.xdist_group("test_precompile_tensorflow")),
    pytest.param("jax", marks=pytest.mark.xdist_group("test_precompile_jax")),
]


def _run(backend, scenario, dump, work):
    pytest.importorskip(backend)
    env = forked.script_env(backend, dump=str(dump))
    proc = forked.run([sys.executable, FITS, str(dump), str(work), scenario], env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    fits = [
        json.loads(ln.split(" ", 1)[1]) for ln in proc.stdout.splitlines() if ln.startswith("XLA_KERAS_PRECOMPILE ")
    ]
    return {fit["name"]: fit for fit in fits}


_DONE: dict = {}


def _ways(backend, tmp_path_factory):
    """One process per backend: the fit without precompile and the three ways to name the set."""
    if backend not in _DONE:
        root = tmp_path_factory.mktemp(f"precompile_{backend}")
        (root / "dump").mkdir()
        _DONE[backend] = _run(backend, "ways", root / "dump", root)
    return _DONE[backend]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("way", ["specs", "log_dir"])
def test_a_precompiled_set_leaves_no_compile_in_the_loop_and_trains_nothing(backend, way, tmp_path_factory):
    fits = _ways(backend, tmp_path_factory)
    none, fit = fits["none"], fits[way]
    # Without precompile the pipeline's new lengths compile after step 1 (else this test proves nothing).
    assert none["after_step_one"] >= 4 and none["files"] == none["shapes"] == 8
    # With it: every step module XLA wrote, written before step 1 ended; one per shape the pipeline feeds.
    assert fit["after_step_one"] == 0
    assert fit["files"] == fit["shapes"] == 8
    facts = fit["report"]["precompile"]["train"]
    assert facts["signatures"] == 8 and facts["in_loop"] == 0 and facts["withheld"] is None
    assert fit["report"]["compilation_count"]["train"] == 8
    assert all(c["precompiled"] and c["step"] == 0 for c in fit["report"]["compilations"] if c["phase"] == "train")
    assert "8 signatures" in fit["printed"] and "0 compiles in the loop" in fit["printed"]
    # Nothing trained: the weights and the optimizer's steps of the fit without precompile.
    assert fit["iterations"] == none["iterations"] > 0
    np.testing.assert_allclose(fit["weights"], none["weights"], rtol=0, atol=1e-5)
    source = {"specs": "the 8 specs given", "log_dir": "the last report in "}[way]
    assert facts["source"].startswith(source)


@pytest.mark.parametrize("backend", BACKENDS)
def test_auto_takes_the_set_from_a_storm_fixs_bucketed_dataset_alone(backend, tmp_path_factory):
    fits = _ways(backend, tmp_path_factory)
    bare, fit = fits["fixed_none"], fits["fixed_auto"]
    assert bare["after_step_one"] >= 2 and bare["files"] == bare["shapes"]
    assert fit["after_step_one"] == 0 and fit["files"] == fit["shapes"] == 4  # the fix's 4 lengths, nothing more
    facts = fit["report"]["precompile"]["train"]
    assert facts["source"] == "the bucket_by_length fix applied to the data" and facts["signatures"] == 4
    assert fit["iterations"] == bare["iterations"] > 0
    np.testing.assert_allclose(fit["weights"], bare["weights"], rtol=0, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_second_run_with_the_persistent_cache_compiles_nothing(backend, tmp_path):
    dump, work = tmp_path / "dump", tmp_path / "work"
    dump.mkdir()
    work.mkdir()
    first = _run(backend, "cache", dump, work)["cache"]
    again = tmp_path / "dump_again"
    again.mkdir()
    second = _run(backend, "cache", again, work)["cache"]
    assert first["files"] == 8 and first["after_step_one"] == 0
    assert second["files"] == 0  # XLA compiled nothing: each program came from the cache
    facts = second["report"]["precompile"]["train"]
    assert facts["signatures"] == 8 and facts["in_loop"] == 0
    probed = [c for c in second["report"]["compilations"] if c["source"] != "timing"]
    assert probed and all(c["cached"] for c in probed)
    if backend == "jax":  # JAX's own compile events before step 1 (loads from the cache, in the second run)
        assert second["compile_events_before_step_one"] <= 0.2 * first["compile_events_before_step_one"]
        assert facts["cached"] == 8
    np.testing.assert_allclose(second["weights"], first["weights"], rtol=0, atol=1e-5)


# ------------------------------------------------------------------ in process (Keras's backend of this run)


def _model():
    import keras

    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    return model


def _data(rows=48):
    rng = np.random.default_rng(0)
    return rng.normal(size=(rows, 4)).astype("float32"), rng.normal(size=(rows, 1)).astype("float32")


def _specs(*sizes):
    import keras

    return [
        (keras.InputSpec(shape=(n, 4), dtype="float32"), keras.InputSpec(shape=(n, 1), dtype="float32")) for n in sizes
    ]


def test_a_compile_the_set_missed_raises_with_on_new_signature_raise(tmp_path):
    import xla_keras

    x, y = _data()
    monitor = xla_keras.XlaMonitor(
        log_dir=str(tmp_path), jit="on", precompile=_specs(32), on_new_signature="raise", verbose=0
    )
    with pytest.raises(xla_keras.CompileAfterPrecompileError) as caught:
        _model().fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[monitor])
    lines = str(caught.value).splitlines()
    assert lines[0] == "Compile after precompile (train step 2): x:float32[16,4] y:float32[16,1]"
    assert lines[1] == "Cause: a signature the precompiled set missed" and len(lines) == 4
    assert max(map(len, lines)) <= 100
    report = monitor.report
    assert report.run_state == "interrupted" and report.precompile["train"]["in_loop"] == 1
    saved = json.loads((tmp_path / "xla_report.json").read_text())  # flushed before the error
    assert saved["precompile"]["train"]["missed"][0]["step"] == 2


def test_compiles_after_the_precompile_warn_once_and_are_all_counted():
    import xla_keras

    x, y = _data(88)

    def batches():  # 32 rows (precompiled), then 16 and 8: two shapes the set missed
        for start, stop in ((0, 32), (32, 48), (48, 56), (56, 88)):
            yield x[start:stop], y[start:stop]

    monitor = xla_keras.XlaMonitor(log_dir=None, jit="on", precompile=_specs(32), verbose=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _model().fit(batches(), epochs=1, verbose=0, callbacks=[monitor])
    ours = [
        w for w in caught if issubclass(w.category, xla_keras.XlaKerasWarning) and "after precompile" in str(w.message)
    ]
    assert len(ours) == 1
    facts = monitor.report.precompile["train"]
    assert facts["in_loop"] == 2 and [m["step"] for m in facts["missed"]] == [2, 3]
    assert monitor.report.compilation_count["train"] == 3


def test_expect_compiles_after_warmup_holds_a_precompiled_fit_and_fails_one_that_compiles_in_the_loop():
    import xla_keras
    from xla_keras.testing import expect_compiles

    x, y = _data()
    monitor = xla_keras.XlaMonitor(log_dir=None, jit="on", precompile=_specs(32, 16), verbose=0)
    with expect_compiles(train=2, after_warmup=0, monitor=monitor) as check:
        _model().fit(x, y, batch_size=32, epochs=2, verbose=0)
    assert check.in_loop == [] and all(c.precompiled for c in check.compilations)
    with pytest.raises(AssertionError) as caught:
        with expect_compiles(train=None, after_warmup=0):
            _model().fit(x, y, batch_size=32, epochs=2, verbose=0)
    assert str(caught.value).splitlines() == [
        "expected 0 compile(s) after warm-up, saw 1:",
        "  train step 2: x:float32[16,4] y:float32[16,1] (cause: signature)",
    ]


def test_validation_batches_of_the_same_structure_are_precompiled_too():
    import xla_keras

    x, y = _data()
    monitor = xla_keras.XlaMonitor(log_dir=None, jit="on", precompile=_specs(32, 16), verbose=0)
    _model().fit(x, y, batch_size=32, epochs=2, verbose=0, validation_data=(x, y), callbacks=[monitor])
    report = monitor.report
    assert report.precompile["test"]["signatures"] == 2 and report.precompile["test"]["in_loop"] == 0
    assert all(c.precompiled for c in report.compilations)
    assert report.compilation_count == {"train": 2, "test": 2, "predict": 0}


def test_what_cannot_be_precompiled_is_withheld_with_the_reason():
    import xla_keras

    x, y = _data()
    off = xla_keras.XlaMonitor(log_dir=None, jit="off", precompile=_specs(32), verbose=0)
    _model().fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[off])
    assert (
        off.report.precompile["train"]["withheld"]
        == "XLA does not compile the step (jit is off): nothing to precompile"
    )
    assert any("precompile (train)" in note for note in off.report.notes)
    auto = xla_keras.XlaMonitor(log_dir=None, jit="on", precompile="auto", verbose=0)
    _model().fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[auto])
    assert auto.report.precompile["train"]["withheld"].startswith("no shape set: no fix of xla_keras.data")
    assert not any("precompile" in note for note in auto.report.notes)  # 'auto' with nothing to go on: quiet
