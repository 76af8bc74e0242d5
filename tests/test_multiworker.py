"""MultiWorkerMirroredStrategy with two local worker processes on loopback.

Each scenario runs once (module fixture) in tests/multiworker.py: two
processes with TF_CONFIG, each with its own XLA dump dir. What is checked
against what each worker really did: the failure of stock Keras fit, XLA's
dump, the losses both workers trained to, the pid in every event file name,
and that no run hangs (a collective mismatch would leave workers waiting).
"""

import glob
import json
import math
import os
import subprocess
import sys

import pytest
from multiworker import comparable, run_workers
from runs import Runs

from xla_keras.backends.tensorflow import _internals
from xla_keras.backends.tensorflow.multiworker import KERAS_ISSUE, WORKAROUND, cluster_from_env
from xla_keras.tools.explain import explain

pytestmark = [pytest.mark.scenario, pytest.mark.xdist_group("test_multiworker")]

SCENARIOS = {
    # Stock Keras, a monitor constructed: fit fails before its first step on Keras 3.15.
    "stock": {"fits": [{"epochs": 1, "monitor": {"log_dir": None}}]},
    # The doctor's patch; jit="on" (refused) with a log dir nobody can create, then auto-clustering with
    # validation into one shared log dir.
    "patched": {
        "workaround": True,
        "configure": True,
        "fits": [
            {"epochs": 1, "monitor": {"jit": "on", "log_dir": "/proc/no_such_dir/xla"}},
            {"epochs": 2, "validation": True, "monitor": {"jit": "autoclustering", "log_dir": "{log_dir}"}},
        ],
    },
    # Worker 1 alone sees varying lengths: a storm under on_storm="raise" (every worker stops at the
    # epoch's end, the first agreement step); then its monitor breaks at its 3rd step, before two
    # validation runs (where a worker pulling differently would hang); then a storm under "fallback".
    "one_worker_differs": {
        "workaround": True,
        "configure": True,
        "data": "lengths",
        "fail_monitor_on_task": 1,
        "fail_in_fit": 2,
        "fail_at_call": 3,
        "fits": [
            {
                "epochs": 1,
                "catch": True,
                "monitor": {"jit": "autoclustering", "on_storm": "raise", "storm_threshold": 3, "log_dir": None},
            },
            {"epochs": 2, "validation": True, "monitor": {"jit": "autoclustering", "log_dir": None}},
            {
                "epochs": 2,
                "monitor": {"jit": "autoclustering", "on_storm": "fallback", "storm_threshold": 3, "log_dir": None},
            },
        ],
    },
}


def _clusters(root):
    """Each scenario's two workers and log dir. A worker spends much of a multi-worker step waiting
    on the other's collectives, so a cluster takes one lane."""

    def run(name):
        (root / name).mkdir()
        spec = json.loads(json.dumps(SCENARIOS[name]).replace("{log_dir}", str(root / name / "logs")))
        return run_workers(str(root / name), spec), str(root / name / "logs")

    return {**{name: (lambda name=name: run(name)) for name in SCENARIOS}, "doctor as worker 1": _doctor_as_worker_1}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return Runs(_clusters, tmp_path_factory, "test_multiworker::runs")


def _loss_equal(a, b):
    return all(math.isclose(x, y, rel_tol=1e-5) for x, y in zip(a, b)) and len(a) == len(b)


def test_stock_keras_fit_fails_exactly_when_the_detection_says_so(runs):
    workers, _ = runs["stock"]
    faults = _internals.keras_multi_worker_fit_faults()
    failed = [bool(w.result["failed"]) for w in workers]
    assert failed == [bool(faults)] * 2, [w.result["failed"] for w in workers]
    if faults:  # Keras 3.15: both workers fail before their first step, with the error the doctor names
        for w in workers:
            assert "Attempt to convert a value (PerReplica" in w.result["failed"]
            assert not w.result["fits"]


def test_the_monitor_warns_before_the_failure_and_explain_recognises_it(runs):
    workers, _ = runs["stock"]
    if not _internals.keras_multi_worker_fit_faults():
        # A Keras with the fix: the monitor must not warn about a failure that does not happen.
        assert all(KERAS_ISSUE not in w.stderr for w in workers)
        return
    for w in workers:
        warning = w.stderr.index(KERAS_ISSUE)
        assert "XlaKerasWarning" in w.stderr[: warning + 2000]
        keys = [f.pattern.key for f in explain((w.stderr + w.result["failed"]).splitlines())]
        assert "keras_multi_worker_fit" in keys


def _doctor_as_worker_1():
    env = dict(
        os.environ,
        TF_CONFIG=json.dumps(
            {"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, "task": {"type": "worker", "index": 1}}
        ),
    )
    env.pop("TF_XLA_FLAGS", None)
    env.pop("XLA_FLAGS", None)
    return subprocess.run(
        [sys.executable, "-m", "xla_keras", "doctor"], env=env, capture_output=True, text=True, timeout=300
    )


def test_doctor_with_tf_config_explains_the_failure_and_prints_the_patch(runs):
    proc = runs["doctor as worker 1"]
    assert "this is worker 1 (not the chief" in proc.stdout
    if _internals.keras_multi_worker_fit_faults():
        assert proc.returncode == 0  # a warning: TF_CONFIG alone does not mean MultiWorkerMirroredStrategy
        assert "[warn ] multi-worker: Keras" in proc.stdout and KERAS_ISSUE in proc.stdout
        assert WORKAROUND in proc.stdout  # the very patch the patched scenario trains with
    else:
        assert proc.returncode == 0


def test_the_patch_makes_fit_train_in_lockstep(runs):
    workers, _ = runs["patched"]
    for w in workers:
        assert w.returncode == 0 and w.result["failed"] is None, w.stderr[-3000:]
    for fit in range(2):
        first, second = (w.result["fits"][fit]["loss"] for w in workers)
        assert all(math.isfinite(v) for v in first)
        assert _loss_equal(first, second)  # synchronous training: both workers hold the same model


def test_jit_on_is_refused_up_front_on_every_worker(runs):
    workers, _ = runs["patched"]
    for w in workers:
        report = w.result["fits"][0]["report"]
        assert report["jit_active"] is False
        assert "jit='on' refused under CollectiveAllReduceStrategy" in report["jit_reason"]
        assert w.result["fits"][0]["report"]["steps"]["train"] == 12


def test_an_unwritable_log_dir_stops_no_worker_and_the_chief_says_so(runs):
    workers, _ = runs["patched"]
    notes = {w.result["task"]: w.result["fits"][0]["report"]["notes"] for w in workers}
    assert any("cannot write to log_dir='/proc/no_such_dir/xla'" in n for n in notes[0])  # the chief
    assert not any("cannot write" in n for n in notes[1])  # the other worker writes nothing anyway
    assert not os.path.exists("/proc/no_such_dir")


def test_every_worker_reports_the_same(runs):
    workers, _ = runs["patched"]
    for fit in range(2):
        reports = [comparable(w.result["fits"][fit]["report"]) for w in workers]
        assert reports[0] == reports[1]


def test_autoclustering_is_not_claimed_off_while_xla_compiled(runs):
    workers, _ = runs["patched"]
    for w in workers:
        report = w.result["fits"][1]["report"]
        assert w.dump_modules > 0  # XLA compiled clusters on this worker
        # No profiler under MWMS, so no module count: "unverified", never "off".
        assert report["jit_active"] is None and "not verified" in report["jit_reason"]
        assert report["probe"] == "timing"
        assert any("does not start the profiler" in note for note in report["notes"])
        # One new signature per phase, each counted once, with an estimate.
        assert report["compilation_count"] == {"train": 1, "test": 1, "predict": 0}
        assert report["steps"] == {"train": 24, "test": 24, "predict": 0}
        assert not report["traces"]  # automatic traces are off under MWMS


def test_only_the_chief_writes_files(runs):
    workers, log_dir = runs["patched"]
    chief = next(w for w in workers if w.result["task"] == 0)
    other = next(w for w in workers if w.result["task"] == 1)
    events = glob.glob(os.path.join(log_dir, "**", "events.out.tfevents.*"), recursive=True)
    assert {os.path.basename(os.path.dirname(e)) for e in events} == {"train", "validation"}
    # Event file names end in .<host>.<pid>.<n>: every one was written by the chief's process.
    assert {int(os.path.basename(e).split(".")[-2]) for e in events} == {chief.result["pid"]}
    with open(os.path.join(log_dir, "xla_report.json")) as f:
        on_disk = json.load(f)
    assert on_disk["steps"] == chief.result["fits"][1]["report"]["steps"]
    # Every worker's counts, gathered by the strategy's all-gather at the epoch ends and the fit's end.
    rows = on_disk["processes"]
    assert [r["process"] for r in rows] == [0, 1]
    for row, worker in zip(rows, sorted(workers, key=lambda w: w.result["task"])):
        assert row["compilation_count"] == worker.result["fits"][1]["report"]["compilation_count"]
        assert row["steps"] == worker.result["fits"][1]["report"]["steps"]
    assert chief.result["fits"][1]["report"]["log_dir"] == log_dir
    assert other.result["fits"][1]["report"]["log_dir"] is None


def test_a_storm_on_one_worker_stops_every_worker_at_the_same_step(runs):
    workers, _ = runs["one_worker_differs"]
    fits = {w.result["task"]: w.result["fits"][0] for w in workers}
    for w in workers:
        assert w.returncode == 0 and w.result["failed"] is None, w.stderr[-3000:]
    # Keras's own step count: both stopped at the first agreement step, the end of the 24-step epoch.
    assert fits[0]["iterations"] == fits[1]["iterations"] == 24
    assert fits[1]["error"].startswith("RecompilationStormError: Recompilation storm (train): 3 new input shapes")
    storms = fits[1]["report"]["storms"]
    assert [s["action"] for s in storms] == ["raise"] and storms[0]["step"] < 24  # opened mid-epoch
    at = storms[0]["step"]
    assert fits[0]["error"].startswith(f"RecompilationStormError: Recompilation storm on worker 1 (train step {at})")
    assert "acts in every worker at train step 24" in fits[0]["error"]
    assert fits[0]["report"]["storms"] == []  # worker 0's lengths never vary: the storm is worker 1's
    assert any(f"worker 1's recompilation storm (train step {at})" in n for n in fits[0]["report"]["notes"])
    signatures = {task: fit["report"]["distinct_signatures"]["train"] for task, fit in fits.items()}
    assert signatures == {0: 1, 1: 6}  # worker 1's data has six padded lengths
    rows = [fit["report"]["processes"] for fit in fits.values()]
    assert rows[0] == rows[1] and [r["steps"]["train"] for r in rows[0]] == [24, 24]  # gathered as they stopped
    assert [r["compilation_count"]["train"] for r in rows[0]] == [1, 6]


def test_a_storm_fallback_on_one_worker_switches_every_worker_at_the_same_step(runs):
    workers, _ = runs["one_worker_differs"]
    fits = {w.result["task"]: w.result["fits"][2] for w in workers}
    for fit in fits.values():
        assert fit["error"] is None and fit["iterations"] == 48 + 24 + 48  # three fits' steps, in Keras's count
        assert fit["report"]["fallback"]["step"] == 72 + 24  # steps are the optimizer's: after 72 in fits 1-2
        assert "recompilation storm" in fit["report"]["fallback"]["reason"]
    assert _loss_equal(fits[0]["loss"], fits[1]["loss"])  # still in lockstep after the switch


def test_a_monitor_failing_on_one_worker_keeps_the_collectives_matched(runs):
    workers, _ = runs["one_worker_differs"]
    by_task = {w.result["task"]: w.result["fits"][1] for w in workers}
    assert any("disabled itself" in note for note in by_task[1]["report"]["notes"])
    assert not any("disabled itself" in note for note in by_task[0]["report"]["notes"])
    # Each worker's 12 batches of 16 rows are rebatched to 8 rows per replica: 24 steps an epoch.
    assert by_task[0]["report"]["steps"] == {"train": 48, "test": 48, "predict": 0}
    # Both workers trained and validated every step together, to the same weights: no hang, no abort.
    assert _loss_equal(by_task[0]["loss"], by_task[1]["loss"])
    assert len(by_task[1]["loss"]) == 2


@pytest.mark.parametrize(
    "config, expected",
    [
        (None, None),
        (
            '{"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 0}}',
            {"tasks": 2, "task": "worker", "index": 0, "chief": True},
        ),
        (
            '{"cluster": {"chief": ["c:0"], "worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}',
            {"tasks": 2, "task": "worker", "index": 0, "chief": False},
        ),
        (
            '{"cluster": {"chief": ["c:0"], "worker": ["a:1"]}, "task": {"type": "chief", "index": 0}}',
            {"tasks": 2, "task": "chief", "index": 0, "chief": True},
        ),
    ],
)
def test_cluster_from_env(config, expected):
    assert cluster_from_env({} if config is None else {"TF_CONFIG": config}) == expected


def test_cluster_from_env_names_a_broken_tf_config():
    assert "not a valid cluster description" in cluster_from_env({"TF_CONFIG": "{not json"})["error"]
