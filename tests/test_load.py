"""Load: what the session keeps per step stays bounded, and counts stay exact.

20k steps over 1000 distinct signatures go through the session, the
backend-neutral core of the step path (signatures, ledger, shape history,
storm detector, compile records, steady timing), with XLA taken as on and no
probe, so every new signature is a compile recorded from step time: 1000 real
XLA compiles would take too long, and the bookkeeping is the same. The
per-step *time* staying flat over a real 20k-step fit is shown by
benchmarks/memory.py; the last test here is a real fit.
"""

import tracemalloc

import numpy as np
import pytest

from xla_keras.config import MonitorConfig
from xla_keras.core.signatures import signature_of
from xla_keras.jit.modes import JitState, ProbeFacts
from xla_keras.session.build import ReportContext, build_report
from xla_keras.session.session import Session

STEPS, DISTINCT, MAX_RECORDS = 20_000, 1000, 100


def _xla_keras_bytes():
    snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(True, "*xla_keras*")])
    return sum(stat.size for stat in snapshot.statistics("filename"))


def test_20k_steps_over_1000_signatures_keep_exact_counts_in_bounded_memory():
    config = MonitorConfig(
        log_dir=None, profile=None, verbose=0, max_records=MAX_RECORDS, storm_threshold=10 * DISTINCT, storm_window=10
    )
    session = Session(config)
    jit = JitState("on", active=True, reason="as if jit_compile=True ran: new signatures are compiles")
    # Batch i has i % 1000 + 1 rows: 1000 distinct signatures, each seen 20 times.
    signatures = [
        signature_of((np.zeros((n + 1, 4), np.float32), np.zeros((n + 1, 1), np.float32))) for n in range(DISTINCT)
    ]
    sizes = {}
    tracemalloc.start()
    try:
        for step in range(1, STEPS + 1):
            plan = session.call_began("train", [signatures[(step - 1) % DISTINCT]], jit)
            assert plan.probe == (step <= DISTINCT)  # a compile step is worth a probe, a known one is not
            session.call_ended("train", jit)
            if step in (3 * DISTINCT, STEPS // 2, STEPS):
                sizes[step] = _xla_keras_bytes()
    finally:
        tracemalloc.stop()
    report = build_report(session.snapshot(), ReportContext("on", jit, ProbeFacts(busy=True)))

    # Counts are exact however many details are dropped.
    assert report.steps["train"] == STEPS
    assert report.distinct_signatures["train"] == DISTINCT
    assert report.compilation_count["train"] == DISTINCT
    assert len(report.compilations) == MAX_RECORDS and report.compilations_dropped == DISTINCT - MAX_RECORDS
    assert all(c.source == "timing" for c in report.compilations)
    # Once every signature has been seen and the steady-time ring buffer (1024) is full,
    # 17 000 more steps add (almost) nothing...
    assert sizes[STEPS] - sizes[3 * DISTINCT] < 8_000, sizes
    assert sizes[STEPS] - sizes[STEPS // 2] < 4_000, sizes
    # ...and what is kept per signature is small (fingerprints, counts, one signature each).
    assert sizes[STEPS] / DISTINCT < 2_000, sizes


@pytest.mark.slow
def test_the_report_caps_details_and_counts_the_overflow():
    tf = pytest.importorskip("tensorflow")
    keras = pytest.importorskip("keras")
    import xla_keras

    sizes = list(range(4, 16))  # 12 batch sizes: 12 real compiles under jit="on"
    data = tf.data.Dataset.from_generator(
        lambda: ((np.ones((n, 4), np.float32), np.ones((n, 1), np.float32)) for n in sizes),
        output_signature=(tf.TensorSpec((None, 4), tf.float32), tf.TensorSpec((None, 1), tf.float32)),
    )
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    monitor = xla_keras.XlaMonitor(log_dir=None, jit="on", verbose=0, max_records=5, storm_threshold=100)
    model.fit(data, epochs=1, callbacks=[monitor], verbose=0)
    report = monitor.report
    assert report.compilation_count["train"] == len(sizes)
    assert len(report.compilations) == 5 and report.compilations_dropped == len(sizes) - 5
    assert [c.step for c in report.compilations] == [1, 2, 3, 4, 5]  # the first ones are kept
    assert report.to_dict()["compilations_dropped"] == len(sizes) - 5
