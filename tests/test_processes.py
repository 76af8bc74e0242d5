"""Several processes in one run, without starting any: what each gives and what the
report and the tab say of them; which storm action runs where. Pure (no TensorFlow, no JAX).
The real processes are tests/test_jax_multiprocess.py's."""

from types import SimpleNamespace

import pytest

from xla_keras.backends.base import Distribution
from xla_keras.callback.agreement import gather_processes, records_of, values_of
from xla_keras.callback.storm_action import AGREE_EVERY_STEPS, PendingStorm, StormAction, StormAgreement
from xla_keras.config import MonitorConfig
from xla_keras.core.types import PHASES
from xla_keras.report.model import XlaReport
from xla_keras.report.render import summary
from xla_keras.session.session import Session
from xla_keras.tensorboard.views import status


def _session(counts, steps):
    session = Session(MonitorConfig())
    for phase in PHASES:
        stats = session.phases[phase]
        stats.compile_count = counts.get(phase, 0)
        stats.step = stats.steps_run = steps.get(phase, 0)
    return session


class Backend:
    def __init__(self, rows):
        self.rows, self.given = rows, []

    def gather(self, values):
        self.given.append(list(values))
        if isinstance(self.rows, Exception):
            raise self.rows
        return self.rows


def _state(processes, backend, session=None):
    return SimpleNamespace(
        dist=Distribution(processes=processes, multi_worker=processes > 1, signatures_agree=True),
        backend=backend,
        session=session or _session({"train": 3, "test": 1}, {"train": 8, "test": 2}),
        current=SimpleNamespace(processes=[]),
    )


def test_each_process_gives_its_counts_seconds_and_steps_per_phase():
    state = _state(2, None)
    values = values_of(state)
    assert values[:3] == [3.0, 1.0, 0.0] and values[6:] == [8.0, 2.0, 0.0]
    (row,) = records_of([values])
    assert row == {
        "process": 0,
        "compilation_count": {"train": 3, "test": 1, "predict": 0},
        "compile_seconds": {"train": values[3], "test": values[4], "predict": values[5]},
        "steps": {"train": 8, "test": 2, "predict": 0},
    }


def test_one_process_gathers_nothing_and_several_keep_every_row_in_order():
    alone = Backend([[0.0] * 9])
    state = _state(1, alone)
    gather_processes(state)
    assert alone.given == [] and state.current.processes == []

    rows = [[3, 1, 0, 0.5, 0.1, 0, 8, 2, 0], [3, 1, 0, 0.6, 0.2, 0, 8, 2, 0]]
    two = Backend([[float(v) for v in r] for r in rows])
    state = _state(2, two)
    gather_processes(state)
    assert len(two.given) == 1
    assert [r["process"] for r in state.current.processes] == [0, 1]
    assert [r["compile_seconds"]["train"] for r in state.current.processes] == [0.5, 0.6]


def test_a_failed_gather_keeps_the_last_rows_and_says_so():
    state = _state(2, Backend(RuntimeError("Gloo AllGather failed: Connection reset by peer")))
    state.current.processes = [{"process": 0}, {"process": 1}]
    gather_processes(state)
    assert state.current.processes == [{"process": 0}, {"process": 1}]
    assert any("could not be gathered at train step 8" in n and "reset by peer" in n for n in state.session.notes.texts)


def test_a_backend_without_a_collective_leaves_the_rows_empty():
    state = _state(2, Backend(None))
    gather_processes(state)
    assert state.current.processes == []


@pytest.mark.parametrize(
    "multi_worker, signatures_agree, processes, in_fit, in_cleanup, on_storm, action, deferred",
    [
        (False, False, 1, True, False, "raise", "raise", False),  # one process
        (True, True, 2, True, False, "raise", "raise", False),  # JAX's processes: the same signatures
        (True, True, 2, False, False, "fallback", "fallback", False),
        (True, False, 2, True, False, "raise", "raise", True),  # TensorFlow's workers: at their agreement
        (True, False, 2, True, False, "fallback", "fallback", True),
        (True, False, 2, False, False, "raise", "warn", True),  # a standalone evaluate: no agreement step
        (True, False, 1, True, False, "raise", "warn", False),  # no collective to agree by
        (True, True, 2, True, True, "raise", "warn", False),  # found while cleaning up: reported only
        (False, False, 1, True, False, "warn", "warn", False),
    ],
)
def test_a_storm_acts_where_every_process_acts_at_the_same_step(
    multi_worker, signatures_agree, processes, in_fit, in_cleanup, on_storm, action, deferred
):
    state = SimpleNamespace(
        dist=Distribution(multi_worker=multi_worker, signatures_agree=signatures_agree, processes=processes),
        in_fit=in_fit,
        in_cleanup=in_cleanup,
        config=MonitorConfig(on_storm=on_storm),
    )
    storms = StormAction(state, None, None)
    assert (storms.action(), storms.deferred()) == (action, deferred)


class Storms:
    """What StormAgreement uses of a StormAction."""

    def __init__(self, pending=None):
        self.pending, self.acted = pending, []

    def fit_began(self):
        self.pending = None

    def deferred(self):
        return True

    def agreed(self, worker, phase, step):
        self.acted.append((worker, phase, step))


def _workers(pendings, on_storm="raise", in_fit=True):
    """One StormAgreement per worker; their gather hands each every worker's row (as the collective
    does), after checking that each gives the row its pending storm makes."""
    rows = [[float(PHASES.index(p.phase)), float(p.step)] if p else [-1.0, 0.0] for p in pendings]
    agreements = []
    for index, pending in enumerate(pendings):

        def gather(row, index=index):
            assert row == rows[index]
            return rows

        state = SimpleNamespace(
            config=MonitorConfig(on_storm=on_storm), in_fit=in_fit, backend=SimpleNamespace(gather=gather)
        )
        agreements.append(StormAgreement(state, Storms(pending)))
    return agreements


def test_every_worker_acts_on_the_first_worker_storm_at_an_agreement_step():
    agreements = _workers([None, PendingStorm("train", 5, "text 1"), PendingStorm("test", 2, "text 2")])
    for agreement in agreements:
        agreement.agree()
    assert [a.action.acted for a in agreements] == [[(1, "train", 5)]] * 3


def test_no_storm_pending_no_action_and_warn_or_outside_a_fit_no_collective():
    agreements = _workers([None, None])
    for agreement in agreements:
        agreement.agree()
    assert [a.action.acted for a in agreements] == [[], []]
    for on_storm, in_fit in (("warn", True), ("raise", False)):
        (agreement,) = _workers([PendingStorm("train", 5, "x")], on_storm, in_fit)
        agreement.state.backend.gather = None  # no collective at all: calling it would fail
        agreement.fit_began()
        assert agreement.on is (on_storm != "warn")  # the batch-end hook does not even call it under warn
        agreement.agree()
        assert agreement.action.acted == []


def test_the_batch_end_hook_agrees_every_50_batches_only():
    gathered = []
    state = SimpleNamespace(
        config=MonitorConfig(on_storm="raise"), in_fit=True, backend=SimpleNamespace(gather=gathered.append)
    )
    agreement = StormAgreement(state, Storms())
    agreement.fit_began()
    assert agreement.on
    for _ in range(3 * AGREE_EVERY_STEPS - 1):
        agreement.batch_ended()
    assert len(gathered) == 2
    agreement.fit_began()
    assert agreement.batches == 0


def _row(process, train, seconds):
    return {
        "process": process,
        "compilation_count": {"train": train, "test": 1, "predict": 0},
        "compile_seconds": {"train": seconds, "test": 0.1, "predict": 0.0},
        "steps": {"train": 16, "test": 4, "predict": 0},
    }


def test_the_report_the_summary_and_the_tab_say_every_process_counts():
    report = XlaReport(
        steps={"train": 16, "test": 4, "predict": 0},
        compilation_count={"train": 6, "test": 1, "predict": 0},
        processes=[_row(0, 6, 2.15), _row(1, 6, 1.99)],
    )
    assert XlaReport.from_json(report.to_json()) == report
    assert "processes       : 2, compiles per process in order: train 6, 6 (2.15 s, 1.99 s); test 1, 1" in str(report)
    assert "compiles: train 6, test 1 (2 processes, the same in each)" in summary(report)
    assert status(report.to_dict())["processes_words"].startswith("2, compiles per process in order: train 6, 6")

    report.processes[1] = _row(1, 7, 2.5)
    assert "(2 processes, not all alike)" in summary(report)

    alone = XlaReport(steps={"train": 4, "test": 0, "predict": 0}, processes=[])
    assert "processes" not in str(alone) and "processes" not in summary(alone)
    assert status(alone.to_dict())["processes_words"] == ""
