"""Load: what the monitor keeps per step stays bounded, and counts stay exact.

20k steps over 1000 distinct signatures go through the very bookkeeping
objects the monitor's step path uses (a phase's state with its shape history
and steady timing, the compile ledger, the storm detector): 1000 real XLA
compiles would take too long, and the bookkeeping is the same. The per-step
*time* staying flat over a real 20k-step fit is shown by benchmarks/memory.py.
"""

import tracemalloc

import numpy as np
import pytest

from xla_keras.compiles import CompileLedger
from xla_keras.monitor import _AUTOCLUSTER_PROBES, _PhaseState
from xla_keras.report import Compilation
from xla_keras.signatures import signature_of
from xla_keras.storms import StormDetector

STEPS, DISTINCT, MAX_RECORDS = 20_000, 1000, 100


def _xla_keras_bytes():
    snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(True, "*xla_keras*")])
    return sum(stat.size for stat in snapshot.statistics("filename"))


def test_20k_steps_over_1000_signatures_keep_exact_counts_in_bounded_memory():
    # Batch i has i % 1000 + 1 rows: 1000 distinct signatures, each seen 20 times.
    batches = [(np.zeros((n + 1, 4), np.float32), np.zeros((n + 1, 1), np.float32)) for n in range(DISTINCT)]
    state = _PhaseState(MAX_RECORDS)
    ledger = CompileLedger(probes_per_signature=_AUTOCLUSTER_PROBES)
    detector = StormDetector(8, 200)
    ledger.set_function("train", object())
    sizes = {}
    tracemalloc.start()
    try:
        for step in range(1, STEPS + 1):
            sig = signature_of(batches[(step - 1) % DISTINCT])
            state.history.observe(sig)
            is_new, _ = ledger.observe("train", sig)
            if is_new:
                detector.new_signature("train", step)
                state.add_record(Compilation("train", step, sig, 0.01, "profiler"))
            else:
                state.timing.add_steady(0.001)
            if step in (DISTINCT, STEPS // 2, STEPS):
                sizes[step] = _xla_keras_bytes()
    finally:
        tracemalloc.stop()

    # Counts are exact however many details are dropped.
    assert ledger.distinct_count("train") == DISTINCT
    assert state.compile_count == DISTINCT
    assert len(state.records) == MAX_RECORDS and state.records_dropped == DISTINCT - MAX_RECORDS
    assert state.compile_seconds() == pytest.approx(0.01 * DISTINCT)
    assert sum(state.history.batches.values()) + state.history.untracked == STEPS
    assert state.timing.steady_count == STEPS - DISTINCT
    # Once every signature has been seen, 19 000 more steps add (almost) nothing...
    assert sizes[STEPS] - sizes[DISTINCT] < 16_000, sizes
    assert sizes[STEPS] - sizes[STEPS // 2] < 8_000, sizes
    # ...and what is kept per signature is small (fingerprints, counts, one signature each).
    assert sizes[STEPS] / DISTINCT < 2_000, sizes


def test_the_report_caps_details_and_counts_the_overflow():
    tf = pytest.importorskip("tensorflow")
    keras = pytest.importorskip("keras")
    import xla_keras

    sizes = list(range(4, 16))  # 12 batch sizes: 12 real compiles under jit="on"
    data = tf.data.Dataset.from_generator(
        lambda: ((np.ones((n, 4), np.float32), np.ones((n, 1), np.float32)) for n in sizes),
        output_signature=(tf.TensorSpec((None, 4), tf.float32), tf.TensorSpec((None, 1), tf.float32)))
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    monitor = xla_keras.XlaMonitor(log_dir=None, jit="on", verbose=0, max_records=5, storm_threshold=100)
    model.fit(data, epochs=1, callbacks=[monitor], verbose=0)
    report = monitor.report
    assert report.compilation_count["train"] == len(sizes)
    assert len(report.compilations) == 5 and report.compilations_dropped == len(sizes) - 5
    assert [c.step for c in report.compilations] == [1, 2, 3, 4, 5]  # the first ones are kept
    assert report.to_dict()["compilations_dropped"] == len(sizes) - 5
