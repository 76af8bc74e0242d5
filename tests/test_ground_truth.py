"""The monitor's compile ledger against XLA's own account, in fresh processes.

Ground truth: one ``*before_optimizations.txt`` per compiled module in
``XLA_FLAGS=--xla_dump_to`` and TensorFlow's own "Compilation of XLA
executable time" lines (``TF_CPP_VMODULE=device_compiler=1``); before TensorFlow 2.18,
its XLA launch ops' own start and end lines too (``xla_ops=1``).
"""

import pytest
from scenario import tf_compiling_op_spans

pytestmark = [pytest.mark.scenario, pytest.mark.xdist_group("scenario_runs")]


def _measured_source(report):
    """How a probe measures compile seconds on the TensorFlow that ran: XLA's compiler events
    (2.18+), or, where the compiler emits none (2.16/2.17 on CPU), the span of the op that
    triggered the compile. Either is checked against TensorFlow's own lines below."""
    major, minor = (int(p) for p in report["versions"]["tensorflow"].split(".")[:2])
    return "profiler" if (major, minor) >= (2, 18) else "op_span"


JIT_ON = ["batch_sizes-on", "partial_batch-on", "padded-on", "steps_per_execution-on", "nested-on"]


def _total(report):
    return sum(report["compilation_count"].values())


@pytest.mark.parametrize("key", JIT_ON)
def test_jit_on_counts_every_dumped_module(scenario_runs, key):
    run = scenario_runs(key)
    assert run.dump_modules > 0
    assert _total(run.report) == run.dump_modules
    assert len(run.report["compilations"]) == run.dump_modules
    _measured_or_past_the_probes_budget(run.report)
    assert run.report["jit_active"] is True


def _measured_or_past_the_probes_budget(report):
    """Each compile was timed by a probe, or, once the probes had used their budget (1% of the monitored
    time and 0.1 s), estimated from its step and said so; the first was probed."""
    records = report["compilations"]
    assert records[0]["source"] == _measured_source(report)
    for record in records:
        assert record["source"] == _measured_source(report) or (
            record["source"] == "timing" and record["estimated_because"] == "probe_budget"
        ), record


@pytest.mark.parametrize("key", JIT_ON)
def test_jit_on_compile_seconds_match_tensorflow_within_10_percent(scenario_runs, key):
    run = scenario_runs(key)
    truth = sum(run.tf_compile_seconds)
    assert len(run.tf_compile_seconds) == run.dump_modules
    if _measured_source(run.report) == "profiler":
        assert run.report["compile_seconds"] == pytest.approx(truth, rel=0.10)
        return
    # Op spans (TF 2.16/2.17): each probed compile is the span of the XLA launch op that compiled, which
    # TensorFlow logs too (start and end, to the microsecond), and that span holds TensorFlow's compile
    # line. The process's first span also holds XLA's one-time start-up, which the compile line leaves
    # out: the ops' own lines are the truth for it, at any load; every later one matches its line.
    spans = tf_compiling_op_spans(run.stderr)
    assert len(spans) == len(run.tf_compile_seconds)
    probed = [
        (c["seconds"], line, span)
        for c, line, span in zip(run.report["compilations"], run.tf_compile_seconds, spans)
        if c["source"] != "timing"
    ]
    assert probed and run.report["compilations"][0]["source"] != "timing"
    for seconds, line, span in probed:
        assert seconds == pytest.approx(span, rel=0.05, abs=0.002)
        assert line * 0.95 <= seconds
    if probed[1:]:
        assert sum(s for s, _, _ in probed[1:]) == pytest.approx(sum(t for _, t, _ in probed[1:]), rel=0.10)


def test_batch_sizes_16_to_23_each_compile_once_at_their_first_step(scenario_runs):
    report = scenario_runs("batch_sizes-on").report
    sizes = [c["signature"][0]["shape"][0] for c in report["compilations"]]
    assert sizes == list(range(16, 24))
    assert [c["step"] for c in report["compilations"]] == list(range(1, 9))
    assert report["distinct_signatures"]["train"] == 8
    assert report["steps"]["train"] == 16  # two epochs, no recompiles in the second


def test_partial_batch_compiles_once_more_per_phase(scenario_runs):
    report = scenario_runs("partial_batch-on").report
    assert report["compilation_count"] == {"train": 2, "test": 2, "predict": 0}
    train = [c for c in report["compilations"] if c["phase"] == "train"]
    assert [c["signature"][0]["shape"] for c in train] == [[64, 8], [40, 8]]
    assert [c["step"] for c in train] == [1, 16]
    test = [c for c in report["compilations"] if c["phase"] == "test"]
    assert [c["signature"][0]["shape"][0] for c in test] == [64, 44]
    assert report["steady_step_seconds"] is not None and report["steady_step_seconds"] < 0.1
    assert 0 < report["compile_share"] < 1


def test_padded_batches_compile_once_per_padded_length(scenario_runs):
    report = scenario_runs("padded-on").report
    lengths = {c["signature"][0]["shape"][1] for c in report["compilations"]}
    assert len(lengths) == report["distinct_signatures"]["train"] == _total(report)
    assert len(lengths) >= 4  # the scenario really varies the padded length


def test_steps_per_execution_numbers_steps_per_batch(scenario_runs):
    report = scenario_runs("steps_per_execution-on").report
    assert [c["step"] for c in report["compilations"]] == [1, 16]
    assert report["steps"]["train"] == 32


def test_nested_inputs_name_every_leaf(scenario_runs):
    report = scenario_runs("nested-on").report
    paths = [leaf["path"] for leaf in report["compilations"][0]["signature"]]
    assert paths == ["x/a", "x/b", "y", "sample_weight"]


def test_jit_off_reports_no_compile_and_xla_dumps_none(scenario_runs):
    run = scenario_runs("partial_batch-off")
    assert run.dump_modules == 0
    assert _total(run.report) == 0
    assert run.report["jit_active"] is False
    assert run.report["distinct_signatures"]["train"] == 2  # shapes are still seen


def test_keep_on_cpu_says_keras_resolved_auto_to_false(scenario_runs):
    run = scenario_runs("partial_batch-keep")
    assert run.dump_modules == 0 and _total(run.report) == 0
    assert run.report["jit_active"] is False
    assert "resolved jit_compile='auto' to False" in run.report["jit_reason"]


@pytest.mark.parametrize("key", ["partial_batch-auto-env", "partial_batch-auto-configure"])
def test_autoclustering_cluster_compiles_equal_the_dump(scenario_runs, key):
    run = scenario_runs(key)
    assert run.dump_modules > 0
    assert _total(run.report) == run.dump_modules
    assert run.report["jit_active"] is True
    assert "cluster" in run.report["jit_reason"]
    assert {c["source"] for c in run.report["compilations"]} == {_measured_source(run.report)}
    truth = sum(run.tf_compile_seconds)
    assert run.report["compile_seconds"] == pytest.approx(truth, rel=0.10)


def test_autoclustering_without_the_early_flag_reports_zero_and_the_fix(scenario_runs):
    run = scenario_runs("partial_batch-auto-late")
    assert run.dump_modules == 0
    assert _total(run.report) == 0
    assert run.report["jit_active"] is False
    assert "xla_keras.configure(cpu_autoclustering=True)" in run.report["jit_reason"]
    assert "TF_XLA_FLAGS=--tf_xla_cpu_global_jit" in run.report["jit_reason"]


def test_busy_profiler_falls_back_to_timing_and_still_counts_exactly(scenario_runs):
    run = scenario_runs("batch_sizes-on-busy")
    assert _total(run.report) == run.dump_modules == 8
    assert {c["source"] for c in run.report["compilations"]} == {"timing"}
    assert run.report["probe"] == "timing"
    assert any("profiler was busy" in note for note in run.report["notes"])
    # A timing estimate is the step minus the steady median: positive, below the step.
    for c in run.report["compilations"]:
        assert 0 < c["seconds"] <= c["step_seconds"]


def test_mirrored_strategy_refuses_jit_on_up_front_and_reads_per_replica_shapes(scenario_runs):
    run = scenario_runs("mirrored-on")
    assert run.report["jit_active"] is False
    assert "jit='on' refused under MirroredStrategy with 2 replicas" in run.report["jit_reason"]
    assert run.dump_modules == 0 and _total(run.report) == 0
    assert run.report["distinct_signatures"]["train"] == 2  # 64 -> 32 per replica, 40 -> 20


def test_mirrored_strategy_makes_fastest_act_as_keep_with_a_note(scenario_runs):
    run = scenario_runs("mirrored-fastest")
    note = "jit='fastest' acts as 'keep' under MirroredStrategy with 2 replicas"
    assert note in run.report["jit_reason"] and any(note in n for n in run.report["notes"])
    assert run.report["jit_decision"] is None and run.report["jit_active"] is False
    assert run.dump_modules == 0 and _total(run.report) == 0  # XLA never ran: Keras's own choice there is off


def test_mirrored_autoclustering_counts_modules_per_replica(scenario_runs):
    run = scenario_runs("mirrored-auto-env")
    assert run.dump_modules > 0
    assert _total(run.report) == run.dump_modules
    per_replica_batch = {c["signature"][0]["shape"][0] for c in run.report["compilations"]}
    assert per_replica_batch == {32, 20}


def test_storm_opens_at_the_threshold_th_compile(scenario_runs):
    run = scenario_runs("storm-warn")
    report = run.report
    assert _total(report) == run.dump_modules
    storm = report["storms"][0]
    fourth_compile = report["compilations"][3]
    assert storm["step"] == fourth_compile["step"] and storm["count"] == 4
    assert storm["action"] == "warn" and len(report["storms"]) == 1
    assert storm["varying"][0]["path"] == "x" and storm["varying"][0]["axis"] == 1
    assert report["_scenario"]["jit_flags_at_epoch_end"] == [True, True, True]


def test_storm_fallback_switches_xla_off_and_xla_stops_compiling(scenario_runs):
    run = scenario_runs("storm-fallback")
    report = run.report
    storm = report["storms"][0]
    assert storm["action"] == "fallback" and report["fallback"]["step"] == storm["step"]
    # XLA's own dump stops growing at the fallback: every module was compiled at or before it.
    assert run.dump_modules == _total(report) == 4
    assert all(c["step"] <= storm["step"] for c in report["compilations"])
    # The function that runs afterwards is not jit-compiled, and training went on for 3 epochs.
    assert report["_scenario"]["jit_flags_at_epoch_end"] == [False, False, False]
    assert report["steps"]["train"] == 36
    assert report["jit_active"] is False and "on_storm='fallback'" in report["jit_reason"]
    # More shapes kept coming after the switch, and none of them compiled.
    assert report["distinct_signatures"]["train"] > 4


def test_off_overrides_auto_jit_from_the_environment(scenario_runs):
    run = scenario_runs("partial_batch-off-env-auto-jit")
    assert run.dump_modules == 0 and _total(run.report) == 0
    assert run.report["jit_active"] is False


def test_keep_under_env_auto_jit_reports_the_clusters_it_compiled(scenario_runs):
    run = scenario_runs("partial_batch-keep-env-auto-jit")
    assert run.dump_modules > 0
    assert _total(run.report) == run.dump_modules
    assert run.report["jit_active"] is True
