"""The cost card, pure: sentinels, memory, the peak table, achieved rates, HLO counting, the meter."""

import math
import os
import re
from types import SimpleNamespace

import pytest

from xla_keras.backends.tensorflow.cost import dot_conv_flops
from xla_keras.callback.cost_card import CostMeter
from xla_keras.config import MonitorConfig
from xla_keras.core.program_cost import (
    ANALYSES_PER_CALL,
    MIN_RATE_STEPS,
    ProgramCost,
    ProgramSteps,
    figure,
    peak_flops_for,
    phase_rates,
)
from xla_keras.core.signatures import Leaf
from xla_keras.core.types import CallPlan, Notes
from xla_keras.report.model import Compilation
from xla_keras.session.phases import PhaseStats


@pytest.mark.parametrize(
    "value, expected",
    [(-1, None), (-1.0, None), (float("nan"), None), (float("inf"), None), (None, None), ("12", 12.0), ("x", None)]
    + [(True, None), (0, 0.0), (0.0, 0.0), (3, 3.0), (2.5e9, 2.5e9)],
)
def test_a_sentinel_is_unavailable_and_a_real_zero_stays_zero(value, expected):
    assert figure(value) == expected


def _memory(argument=109724, output=101544, alias=101404, temp=50308, code=0):
    return SimpleNamespace(
        argument_size_in_bytes=argument,
        output_size_in_bytes=output,
        alias_size_in_bytes=alias,
        temp_size_in_bytes=temp,
        generated_code_size_in_bytes=code,
    )


def test_xla_figures_and_the_peak_count_donated_state_once():
    cost = ProgramCost.from_xla({"flops": 1186968.0, "bytes accessed": 574160.0}, _memory(), "xla", True)
    assert (cost.flops, cost.bytes_accessed, cost.code_bytes) == (1186968.0, 574160.0, 0)
    assert cost.peak_bytes == 109724 + 101544 - 101404 + 50308
    assert cost.unavailable is None
    assert ProgramCost.from_dict(cost.to_dict()) == cost and cost.to_dict()["peak_bytes"] == 160172


@pytest.mark.parametrize(
    "analysis, memory, unavailable",
    [
        ({"flops": -1.0, "bytes accessed": -1.0}, _memory(), ["flops", "bytes_accessed"]),  # jax#16008
        ({"flops": 0.0, "bytes accessed": 0.0}, _memory(), ["flops", "bytes_accessed"]),  # jax#18954
        ({}, _memory(), ["flops", "bytes_accessed"]),  # a missing key
        ({"flops": 10.0, "bytes accessed": 4.0}, _memory(0, 0, 0, 0, 0), ["argument_bytes", "temp_bytes"]),
        ({"flops": 10.0, "bytes accessed": 4.0}, None, ["argument_bytes", "output_bytes", "alias_bytes"]),
        ({"flops": 10.0, "bytes accessed": 4.0}, _memory(temp=-1), ["temp_bytes"]),
        (None, None, ["flops", "argument_bytes"]),
    ],
)
def test_unavailable_figures_are_none_and_named(analysis, memory, unavailable):
    cost = ProgramCost.from_xla(analysis, memory, "a source", True)
    for name in unavailable:
        assert getattr(cost, name) is None
        assert name in cost.unavailable and "a source" in cost.unavailable
    if cost.temp_bytes is None or cost.argument_bytes is None:
        assert cost.peak_bytes is None  # never a peak from a missing part


def _allocation(size, parameter=False, aliased=False, live_out=False, constant=False, thread_local=False, color=0):
    return {
        "size": size,
        "is_entry_computation_parameter": parameter,
        "aliased_with_output": aliased,
        "maybe_live_out": live_out,
        "is_constant": constant,
        "is_thread_local": thread_local,
        "color": color,
    }


def test_tensorflow_memory_sums_xla_buffer_assignment_as_xla_memory_statistics_do():
    from xla_keras.backends.tensorflow.cost import buffer_memory

    allocations = [
        _allocation(1000, parameter=True, aliased=True, live_out=True),  # a variable updated in place
        _allocation(300, parameter=True),  # the batch
        _allocation(176, live_out=True),  # the output tuple
        _allocation(4, live_out=True),  # the loss
        _allocation(5000),  # the preallocated temp
        _allocation(20, constant=True),
        _allocation(96, thread_local=True),
        _allocation(4096, parameter=True, color=5),  # in the host memory space: not the device's
        _allocation(2048, color=5),
    ]
    memory = buffer_memory(allocations)
    assert memory == {"argument_bytes": 1300, "output_bytes": 1180, "alias_bytes": 1000, "temp_bytes": 5000}
    # the peak counts the updated variable once: everything but constants and thread-local buffers
    assert ProgramCost(**memory).peak_bytes == 1300 + 176 + 4 + 5000


def _tf_step():
    tf = pytest.importorskip("tensorflow")

    @tf.function(jit_compile=True)
    def one_step_on_data(x):
        return tf.matmul(x, tf.ones((8, 4)))

    return tf, one_step_on_data


def test_tensorflow_memory_that_cannot_be_read_says_why_in_one_line_and_the_flops_stand(monkeypatch):
    from xla_keras.backends.tensorflow import _internals, cost

    tf, step = _tf_step()

    def fails(step_fn, args):
        raise RuntimeError("INTERNAL: no proto\n\tat some C++ frame\n\tat another")

    monkeypatch.setattr(_internals, "compiled_buffer_allocations", fails)
    card = cost.program_cost(step, tf.TensorSpec((16, 8), tf.float32), "full")
    assert card.flops == 2 * 16 * 8 * 4 and card.peak_bytes is None and not card.exact
    assert "memory: reading XLA's buffer assignment failed: RuntimeError: INTERNAL: no proto" in card.unavailable
    assert "C++ frame" not in card.unavailable and len(card.unavailable) <= 200
    monkeypatch.setattr(tf.config, "list_logical_devices", lambda: [SimpleNamespace(device_type="TPU")])
    card = cost.program_cost(step, tf.TensorSpec((16, 8), tf.float32), "full")
    assert card.peak_bytes is None and "memory: read on CPU and GPU only (TPU here)" in card.unavailable


def test_tensorflow_full_memory_of_a_real_step_and_the_default_compiles_nothing():
    from xla_keras.backends.tensorflow import cost

    tf, step = _tf_step()
    spec = tf.TensorSpec((16, 8), tf.float32)
    assert cost.program_cost(step, spec, "auto").peak_bytes is None  # no second compile by default
    card = cost.program_cost(step, spec, "full")
    # arguments: x (16x8 float32); output: the 16x4 product; nothing aliased
    assert (card.argument_bytes, card.output_bytes, card.alias_bytes) == (512, 256, 0), card
    assert "compiled again" in card.source and card.unavailable.endswith("code bytes: not in XLA's buffer assignment")


def test_a_real_zero_alias_is_kept():
    cost = ProgramCost.from_xla({"flops": 5.0, "bytes accessed": 7.0}, _memory(alias=0), "xla", True)
    assert cost.alias_bytes == 0 and cost.peak_bytes == 109724 + 101544 + 50308


@pytest.mark.parametrize(
    "kind, dtype, peak",
    [
        ("NVIDIA A100-SXM4-40GB", "bfloat16", 312e12),
        ("NVIDIA A100-SXM4-80GB", "float32", 156e12),  # TF32: XLA's default for float32 matmuls there
        ("NVIDIA H100 80GB HBM3", "bfloat16", 989e12),
        ("NVIDIA H100 PCIe", "bfloat16", 756e12),
        ("NVIDIA L40S", "bfloat16", 362e12),  # not the L4's row
        ("NVIDIA L4", "bfloat16", 121e12),
        ("TPU v5", "bfloat16", 459e12),
        ("TPU v5 lite", "bfloat16", 197e12),
        ("Tesla T4", "float16", 65e12),
        ("TPU v4", "bfloat16", 275e12),
        ("TPU v4", "float32", None),  # no row for that dtype: no MFU rather than a wrong one
        ("cpu", "float32", None),
        ("", "float32", None),
    ],
)
def test_the_peak_table_by_device_and_dtype(kind, dtype, peak):
    assert peak_flops_for(kind, dtype) == peak


def test_rates_rest_on_the_steady_step_and_say_how_many_steps():
    cost = ProgramCost(flops=2e9, bytes_accessed=1e9)
    rates = phase_rates(cost, 0.01, 50, (1e12, "table"))
    assert math.isclose(rates["flops_per_second"], 2e11) and math.isclose(rates["bytes_per_second"], 1e11)
    assert math.isclose(rates["mfu"], 0.2) and rates["steady_steps"] == 50 and rates["rates_withheld"] is None
    few = phase_rates(cost, 0.01, 3, (1e12, "table"))
    assert few["flops_per_second"] is None and few["mfu"] is None and "3 steady steps" in few["rates_withheld"]
    assert phase_rates(cost, 0.01, 50, None)["mfu"] is None  # no peak known: no MFU
    assert phase_rates(ProgramCost(), 0.01, 50, (1e12, "t"))["flops_per_second"] is None


HLO = "\n".join(  # HLO lines as TensorFlow's unoptimised HLO prints them (operand shapes inline)
    [
        "%MatMul.8 = f32[32,128]{1,0} dot(f32[32,64]{1,0} %reshape.2, f32[64,128]{1,0} %arg2.1), "
        "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
        "%MatMul.14 = f32[64,128]{1,0} dot(f32[32,64]{1,0} %arg0.1, f32[32,128]{1,0} %m), "
        "lhs_contracting_dims={0}, rhs_contracting_dims={0}",
        "%conv = f32[8,14,14,16]{3,2,1,0} convolution(f32[8,16,16,3]{3,2,1,0} %x, f32[3,3,3,16]{3,2,1,0} %k), "
        "window={size=3x3}, dim_labels=b01f_01io->b01f",
        "%add.1 = f32[32,128]{1,0} add(f32[32,128]{1,0} %a, f32[32,128]{1,0} %b)",
    ]
)


def test_hlo_products_are_counted_two_flops_per_multiply_add():
    dots = 2 * 32 * 128 * 64 + 2 * 64 * 128 * 32
    conv = 2 * (8 * 14 * 14 * 16) * (3 * 3 * 3)
    assert dot_conv_flops(HLO) == dots + conv
    assert dot_conv_flops("%add.1 = f32[2]{0} add(f32[2]{0} %a, f32[2]{0} %b)") is None


@pytest.mark.parametrize(
    "kwargs, words", [({"cost": "on"}, "'auto', 'full', 'off'"), ({"cost": None}, "'auto', 'full', 'off'")]
)
def test_bad_cost_names_the_choices(kwargs, words):
    with pytest.raises(ValueError, match=words):
        MonitorConfig(log_dir=None, **kwargs)


@pytest.mark.parametrize("peak", [0, -1, "fast", True, float("inf")])
def test_bad_peak_flops_says_what_is_accepted(peak):
    with pytest.raises(ValueError, match="peak_flops must be one device's peak FLOP/s > 0"):
        MonitorConfig(log_dir=None, peak_flops=peak)


class FakeBackend:
    """Records what the meter asks; each spec is the batch's size."""

    cost_source = "fake analysis"

    def __init__(self, ends_calls_in_wrapper=False, fail=False):
        self.ends_calls_in_wrapper = ends_calls_in_wrapper
        self.fail = fail
        self.analysed = []

    def cost_spec(self, batch):
        return len(batch)

    def program_cost(self, model, phase, spec, mode, notes):
        if self.fail:
            raise RuntimeError("no program")
        self.analysed.append((phase, spec))
        return ProgramCost(flops=1e6 * spec, source=self.cost_source)

    def device_kind(self):
        return "NVIDIA A100-SXM4-40GB"


def _signature(size):
    return (Leaf("x", "float32", (size, 4)),)


def _stats_with(sizes):
    stats = PhaseStats(max_records=100)
    for step, size in enumerate(sizes, 1):
        stats.records.append(Compilation("train", step, _signature(size), 0.1, "jax"))
    return stats


FUNCTION = object()  # the ledger's token of the step function that runs


def _capture(meter, sizes, function=FUNCTION):
    for step, size in enumerate(sizes, 1):
        plan = CallPlan("train", step, 1, ((0, step, _signature(size)),), True)
        meter.capture("train", plan, [[0] * size], function)


def _analysed(backend, sizes=(8,), mode="auto", peak=None, notes=None):
    """A meter that captured one call per size and analysed them, and the phase holding their records."""
    meter = CostMeter(mode, peak, backend, notes if notes is not None else Notes())
    stats = _stats_with(list(sizes))
    _capture(meter, list(sizes))
    meter.analyse(None, {"train": stats})
    return meter, stats


def test_one_analysis_per_signature_capped_per_call_and_every_record_gets_its_figures():
    backend, notes = FakeBackend(), Notes()
    meter = CostMeter("auto", None, backend, notes)
    meter.call_began()
    sizes = [8, 16, 8, 16] + list(range(20, 40))  # a storm of new shapes after two that repeat
    stats = _stats_with(sizes)
    _capture(meter, sizes)
    meter.analyse(None, {"train": stats})
    assert len(backend.analysed) == ANALYSES_PER_CALL  # 8 and 16 once each, then the first few of the storm
    assert [spec for _, spec in backend.analysed[:3]] == [8, 16, 20]
    assert [r.cost.flops for r in stats.records[:4]] == [8e6, 16e6, 8e6, 16e6]  # the same program's figures
    assert all(r.cost is None for r in stats.records[ANALYSES_PER_CALL + 2 :])
    assert any("8 train programs analysed in this call" in note for note in notes.texts)
    meter.call_began()  # the next fit: its own budget
    _capture(meter, [50])
    meter.analyse(None, {"train": stats})
    assert backend.analysed[-1] == ("train", 50)


def test_programs_past_the_cap_that_ran_again_are_analysed_and_the_rate_then_rests_on_every_step():
    """A storm past the cap, then its shapes again (a second epoch): the programs that ran again get their
    figures (most steps first, up to the cap once more), so the rate counts every step; those that ran once
    stay unanalysed."""
    backend, notes = FakeBackend(), Notes()
    meter = CostMeter("auto", 1e12, backend, notes)
    meter.call_began()
    storm = list(range(10, 10 + ANALYSES_PER_CALL + 3))  # 3 programs past the cap
    stats = _stats_with(storm)
    _capture(meter, storm)
    for size in storm:
        stats.history.observe(_signature(size))
    stats.timing.add_interval(0.01, 40)
    meter.analyse(None, {"train": stats})
    assert len(backend.analysed) == ANALYSES_PER_CALL  # the past-cap programs ran once: not analysed yet
    rates = meter.rates({"train": stats})["train"]
    assert rates["flops_per_second"] is None and rates["rates_withheld"].startswith("FLOPs unknown for 3 of 11 steps")
    again = storm[-2:]  # two of the three past the cap run again, the last one most
    for size in again + [storm[-1]]:
        stats.history.observe(_signature(size))
    meter.analyse(None, {"train": stats})
    assert [spec for _, spec in backend.analysed[ANALYSES_PER_CALL:]] == [storm[-1], storm[-2]]
    assert [r.cost.flops if r.cost else None for r in stats.records[-3:]] == [None, 1e6 * storm[-2], 1e6 * storm[-1]]
    assert "only up to 8 that ran again get figures" in " ".join(notes.texts)
    rates = meter.rates({"train": stats})["train"]  # one step of 14 of a program never analysed: 93% counted
    assert rates["rates_withheld"] is None and (rates["program_steps"], rates["steps_ran"]) == (13, 14)
    counted = 1e6 * (sum(storm[:-3]) + 2 * storm[-2] + 3 * storm[-1])  # each storm size once, then again + storm[-1]
    assert math.isclose(rates["flops_per_step"], counted / 13)


def test_a_failed_analysis_is_unavailable_with_the_reason_and_training_goes_on():
    meter, stats = _analysed(FakeBackend(fail=True))
    cost = stats.records[0].cost
    assert cost.flops is None and "RuntimeError: no program" in cost.unavailable


def test_cost_off_analyses_nothing():
    backend = FakeBackend()
    meter, stats = _analysed(backend, mode="off")
    assert backend.analysed == [] and stats.records[0].cost is None and meter.rates({"train": stats}) == {}


@pytest.mark.parametrize("drained", [False, True])
def test_under_asynchronous_dispatch_rates_wait_for_an_interval_between_drains(drained):
    """JAX: a dispatch time is never a step time. Until an interval between drains is known the rates
    are withheld with the reason; then they rest on it, whatever the runs' length."""
    meter, stats = _analysed(FakeBackend(ends_calls_in_wrapper=True), peak=2e12)
    stats.history.observe(_signature(8))
    stats.steps_run, stats.runs = 40, 10
    stats.interval.open_at(0.0, 0)
    if drained:
        stats.timing.add_interval(0.004, 40)
    rates = meter.rates({"train": stats})["train"]
    if not drained:
        assert rates["flops_per_second"] is None and rates["mfu"] is None
        assert rates["rates_withheld"].startswith("no interval between drains yet")
        assert meter.scalars("train", stats) == []  # withheld: no number written
    else:
        assert math.isclose(rates["flops_per_second"], 8e6 / 0.004) and math.isclose(rates["mfu"], 2e9 / 2e12)
        assert rates["steady_steps"] == 40 and rates["rates_withheld"] is None
        tags = {s.tag: s.value for s in meter.scalars("train", stats)}
        assert tags == {"xla/flops_per_second": rates["flops_per_second"], "xla/mfu": rates["mfu"]}


def test_the_peak_comes_from_the_table_for_a_known_device():
    meter = CostMeter("auto", None, FakeBackend(), Notes())
    model = SimpleNamespace(dtype_policy=SimpleNamespace(compute_dtype="bfloat16"))
    assert meter.peak(model) == (312e12, "the peak table for NVIDIA A100-SXM4-40GB (bfloat16)")


MODULE = "\n".join(
    [
        "HloModule m",
        "",
        "ENTRY %main (a: f32[4,8], b: f32[8,2], x: f32[1,4,1], k: f32[3,1,1]) -> (f32[4,2], f32[1,4,1]) {",
        "  %a = f32[4,8]{1,0} parameter(0)",
        "  %b = f32[8,2]{1,0} parameter(1)",
        "  %x = f32[1,4,1]{2,1,0} parameter(2)",
        "  %k = f32[3,1,1]{2,1,0} parameter(3)",
        "  %dead = f32[8,8]{1,0} dot(f32[4,8]{1,0} %a, f32[4,8]{1,0} %a), lhs_contracting_dims={0}, "
        "rhs_contracting_dims={0}",
        "  %used = f32[4,2]{1,0} dot(f32[4,8]{1,0} %a, f32[8,2]{1,0} %b), lhs_contracting_dims={1}, "
        "rhs_contracting_dims={0}",
        "  %conv = f32[1,4,1]{2,1,0} convolution(f32[1,4,1]{2,1,0} %x, f32[3,1,1]{2,1,0} %k), "
        "window={size=3 pad=1_1}, dim_labels=b0f_0io->b0f",
        "  ROOT %out = (f32[4,2]{1,0}, f32[1,4,1]{2,1,0}) tuple(f32[4,2]{1,0} %used, f32[1,4,1]{2,1,0} %conv)",
        "}",
    ]
)


def test_what_the_result_never_reaches_and_padding_are_no_work():
    # %used: 4x2 outputs of 8 multiply-adds; %conv: 10 of its 12 window positions overlap the input
    # (the first and last output see one padded zero each); %dead feeds nothing (XLA removes it).
    assert dot_conv_flops(MODULE) == 2 * (4 * 2 * 8) + 2 * 10


def test_a_rebuilt_function_is_another_program_and_its_records_get_its_own_figures():
    backend = FakeBackend()
    meter, stats = _analysed(backend)
    _capture(meter, [8])  # the same function again: nothing to analyse
    assert len(backend.analysed) == 1
    backend.program_cost = lambda model, phase, spec, mode, notes: ProgramCost(flops=5.0, source="rebuilt")
    stats.records.append(Compilation("train", 9, _signature(8), 0.1, "jax"))  # model.compile(): compiled again
    _capture(meter, [8], function=object())
    meter.analyse(None, {"train": stats})
    assert [r.cost.flops for r in stats.records] == [8e6, 5.0]


def test_no_rate_from_a_program_the_steady_steps_did_not_run():
    """Steps ran a program with no FLOPs (past the cap, say): the phase's FLOPs and rates are withheld with
    the steps they miss, never the analysed program's FLOPs over every step's time."""
    meter, stats = _analysed(FakeBackend(), peak=1e12)
    for _ in range(50):
        stats.history.observe(_signature(16))  # the steady signature: never analysed (the cap, say)
    stats.history.observe(_signature(8))
    stats.timing.add_steady_run([0.01] * 50)
    stats.steps_run, stats.runs = 51, 1
    rates = meter.rates({"train": stats})["train"]
    assert rates["flops_per_step"] is None and rates["flops_per_second"] is None and rates["mfu"] is None
    assert rates["bytes_per_second"] is None and rates["programs"] == 1 and rates["program_steps"] == 1
    assert rates["steps_ran"] == 51
    assert rates["rates_withheld"].startswith("FLOPs unknown for 50 of 51 steps (1 of 2 programs")
    assert meter.scalars("train", stats) == []  # withheld: no number written


def _mixed(meter_sizes, fed, steady=(0.01, 40, 2), ends_in_wrapper=False):
    """A meter that analysed one program per size in ``meter_sizes`` (FLOPs: 1e6 x size, the fake's), and a
    phase whose steps fed ``fed`` ({size: batches}) with a steady step of ``steady`` (seconds, steps,
    intervals; 0 intervals: steps timed one by one)."""
    meter, stats = _analysed(FakeBackend(ends_calls_in_wrapper=ends_in_wrapper), sizes=meter_sizes, peak=1e12)
    for size, batches in fed.items():
        for _ in range(batches):
            stats.history.observe(_signature(size))
    seconds, steps, intervals = steady
    if intervals:
        for _ in range(intervals):
            stats.timing.add_interval(seconds, steps // intervals)
    else:
        stats.timing.add_steady_run([seconds] * steps)
    stats.steps_run, stats.runs = sum(fed.values()), max(1, intervals)
    return meter, stats


def test_with_several_shapes_the_rate_is_each_programs_flops_times_its_steps_over_their_time():
    """30 steps of 8 MFLOP and 10 of 16 MFLOP in 40 steady steps of 10 ms: 400 MFLOP in 0.4 s is 1 GFLOP/s.
    The most frequent program's FLOPs over the steady step (the old rate) said 0.8 GFLOP/s."""
    meter, stats = _mixed((8, 16), {8: 30, 16: 10})
    rates = meter.rates({"train": stats})["train"]
    truth_flops = 30 * 8e6 + 10 * 16e6  # each program's FLOPs times the steps that ran it
    truth_seconds = 40 * 0.01  # the time those steps took
    assert math.isclose(rates["flops_per_second"], truth_flops / truth_seconds)
    assert math.isclose(rates["flops_per_step"], truth_flops / 40) and math.isclose(rates["mfu"], 1e9 / 1e12)
    assert not math.isclose(rates["flops_per_second"], 8e6 / 0.01)  # not the most frequent program's
    assert rates["programs"] == 2 and rates["program_steps"] == 40 and rates["steady_steps"] == 40
    assert rates["time_base"] == "the phase's steady step: the mean of 40 steps over 2 intervals"
    assert rates["rates_withheld"] is None
    tags = {s.tag: s.value for s in meter.scalars("train", stats)}
    assert tags == {"xla/flops_per_second": rates["flops_per_second"], "xla/mfu": rates["mfu"]}


def test_with_one_shape_the_rate_is_its_flops_over_the_steady_step():
    meter, stats = _mixed((8,), {8: 40}, steady=(0.01, 40, 0))
    rates = meter.rates({"train": stats})["train"]
    assert math.isclose(rates["flops_per_second"], 8e6 / 0.01) and rates["programs"] == 1
    assert rates["time_base"] == "the phase's steady step: the median of 40 steps timed one by one"


def test_several_programs_rest_on_the_mean_of_their_steps_not_their_median():
    """TensorFlow: a median of steps of mixed programs is one program's step, not the time their steps took:
    the rate divides by the mean of the steps timed one by one."""
    meter, stats = _mixed((8, 16), {8: 30, 16: 10}, steady=(0.01, 40, 0))
    stats.timing.add_steady_run([0.03] * 20)  # the median stays 10 ms; the mean is (40 x 10 + 20 x 30) / 60 ms
    rates = meter.rates({"train": stats})["train"]
    assert math.isclose(stats.timing.median_seconds, 0.01) and math.isclose(rates["flops_per_step"], 1e7)
    assert math.isclose(rates["flops_per_second"], 1e7 / (1.0 / 60)) and rates["rates_withheld"] is None
    assert rates["time_base"].startswith("the mean of the phase's steady steps")


def test_steps_whose_signature_was_not_kept_withhold_the_rates():
    meter, stats = _mixed((8,), {8: 40})
    stats.history.untracked = 5  # past the signatures a phase keeps: their programs are unknown
    rates = meter.rates({"train": stats})["train"]
    assert rates["flops_per_second"] is None and rates["flops_per_step"] is None
    assert rates["rates_withheld"].startswith("FLOPs unknown for 5 of 45 steps (1 of 2 programs")


def test_memory_is_the_largest_programs_and_bytes_weigh_like_flops():
    programs = [
        ProgramSteps(
            ProgramCost(flops=1e6, bytes_accessed=4e6, argument_bytes=10, output_bytes=5, alias_bytes=0, temp_bytes=5),
            3,
        ),
        ProgramSteps(
            ProgramCost(flops=3e6, bytes_accessed=8e6, argument_bytes=40, output_bytes=5, alias_bytes=5, temp_bytes=0),
            1,
        ),
        ProgramSteps(None, 0),  # a program that ran no step counts nowhere
    ]
    rates = phase_rates(programs, 0.002, 20, None, intervals=2)
    assert math.isclose(rates["flops_per_step"], 1.5e6) and math.isclose(rates["flops_per_second"], 7.5e8)
    assert math.isclose(rates["bytes_per_second"], (3 * 4e6 + 8e6) / 4 / 0.002) and rates["peak_bytes"] == 40
    assert rates["programs"] == 2 and rates["program_steps"] == 4


@pytest.mark.parametrize("steps", [MIN_RATE_STEPS - 1, MIN_RATE_STEPS, 20])
@pytest.mark.parametrize("ends_in_wrapper", [False, True])
def test_rates_need_min_rate_steps_steady_steps_and_no_longer_runs(steps, ends_in_wrapper):
    """The rule: rates rest on at least MIN_RATE_STEPS steady steps, on either backend. Under JAX a run of
    20 steps (one interval between drains) gives them: no minimum run length applies."""
    meter, stats = _mixed((8,), {8: steps}, steady=(0.01, steps, 1), ends_in_wrapper=ends_in_wrapper)
    rates = meter.rates({"train": stats})["train"]
    if steps < MIN_RATE_STEPS:
        assert rates["flops_per_second"] is None
        assert rates["rates_withheld"] == f"{steps} steady steps ({MIN_RATE_STEPS} needed)"
    else:
        assert rates["rates_withheld"] is None and math.isclose(rates["flops_per_second"], 8e6 / 0.01)


def test_the_docs_state_the_code_rule_for_rates():
    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "cost.md")) as f:
        text = " ".join(f.read().split())
    assert f"fewer than {MIN_RATE_STEPS} steady steps (`MIN_RATE_STEPS`," in text
    assert not re.search(r"at least \d+ steps on average", text)  # no minimum run length: the code has none


def test_a_convolution_window_is_read_in_its_spatial_dims_order():
    # lhs labels b10f: spatial dim 1 comes first in the layout; the window lists dim 0 then dim 1.
    line = (
        "%c = f32[1,3,5,1]{3,2,1,0} convolution(f32[1,3,5,1]{3,2,1,0} %x, f32[3,1,1,1]{3,2,1,0} %k), "
        "window={size=3x1 pad=1_1x0_0}, dim_labels=b10f_01io->b10f"
    )
    # dim 0: input 5 (lhs axis 2), kernel 3, output 5, pad 1_1: 13 overlapping pairs; dim 1: 3 x 1 x 3 = 3
    assert dot_conv_flops(line) == 2 * 1 * 1 * 1 * 13 * 3


def test_a_batch_the_backend_cannot_describe_leaves_its_records_unavailable_with_the_reason():
    backend = FakeBackend()
    backend.cost_spec = lambda batch: (_ for _ in ()).throw(TypeError("a distributed batch"))
    meter, stats = _analysed(backend)
    assert stats.records[0].cost.flops is None and "TypeError: a distributed batch" in stats.records[0].cost.unavailable
