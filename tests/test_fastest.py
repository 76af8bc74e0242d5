"""jit='fastest', the pure part (xla_keras/jit/: trial, gate, decision, statistics, outlook): the trial's
statistics against numpy and simulation, and its decisions on simulated fits whose true step times are known.

The simulator plays a fit step by step as the monitor does: the mode the trial runs, a step time
drawn from that mode's distribution (the first call of each mode's function costs its first-call
time and is no steady step), ``check`` whenever the step reaches ``next_check``."""

import math
import random
import re

import numpy as np
import pytest

from xla_keras.jit import trial as jit_trial
from xla_keras.jit.decision import (
    Decision,
    Outlook,
    Ratio,
    expected_compiles,
    expected_new,
    keep_default_reason,
    separated,
    spread,
)
from xla_keras.jit.trial import BLOCK_STEPS, MAX_ROUNDS, MIN_STEPS_LEFT, Trial
from xla_keras.storms.detection import StormRule


@pytest.mark.parametrize("values", [[1.0], [3.0, 1.0, 2.0], list(range(17)), [0.5, 0.1, 0.9, 0.3, 0.2, 0.7]])
def test_spread_matches_numpy(values):
    s = spread(values)
    q1, q2, q3 = np.percentile(values, [25, 50, 75])
    assert s.median == pytest.approx(q2) and s.iqr == pytest.approx(q3 - q1) and s.n == len(values)


def test_no_values_no_spread():
    assert spread([]) is None


def test_notches_separate_only_clear_differences():
    rng = np.random.default_rng(0)
    a = spread(list(1.0 + 0.05 * rng.standard_normal(40)))
    assert separated(a, spread(list(1.2 + 0.05 * rng.standard_normal(40))))
    assert not separated(a, spread(list(1.0 + 0.05 * rng.standard_normal(40))))


def test_ratio_interval_is_students_t_on_the_logs():
    logs = [0.1, 0.2, 0.15, 0.05]
    r = Ratio.of(logs)
    mean, sd = np.mean(logs), np.std(logs, ddof=1)
    half = 3.18 * sd / math.sqrt(4)  # t(0.975, 3)
    assert (r.value, r.low, r.high) == pytest.approx((math.exp(mean), math.exp(mean - half), math.exp(mean + half)))
    assert r.excludes_one and r.gain == pytest.approx(math.exp(mean) - 1)
    assert not Ratio.of([0.1, -0.1]).excludes_one and Ratio.of([0.01, -0.01, 0.0]).within(0.03)


@pytest.mark.parametrize(
    "weights",
    [
        [1] * 50,  # 50 equally likely shapes
        [1 / k for k in range(1, 81)],  # Zipf over 80 shapes
        [10] * 5 + [1] * 30,  # a few common shapes, many rare
    ],
)
def test_expected_new_signatures_match_simulation(weights):
    """Chao's extrapolation against the mean number of new shapes a simulated sampler shows."""
    rng = np.random.default_rng(1)
    p = np.array(weights) / sum(weights)
    seen_n, ahead = 60, 200
    estimates, truths = [], []
    for _ in range(200):
        draws = rng.choice(len(p), size=seen_n + ahead, p=p)
        counts = np.bincount(draws[:seen_n], minlength=len(p))
        estimates.append(expected_new([int(c) for c in counts if c], ahead))
        truths.append(len(set(draws[seen_n:]) - set(draws[:seen_n])))
    assert np.mean(estimates) == pytest.approx(np.mean(truths), rel=0.3)


def test_expected_compiles_counts_seen_shapes_the_xla_function_has_not_compiled():
    counts = {1: 50, 2: 50}  # two shapes, each seen many times: nothing new is expected
    assert expected_new(list(counts.values()), 1000) == 0
    assert expected_compiles(counts, {1, 2}, 1000) == 0
    assert expected_compiles(counts, {1}, 1000) == pytest.approx(1.0)
    assert expected_compiles(counts, set(), 1000) == pytest.approx(2.0)
    assert expected_compiles(counts, set(), 0) == 0


# ------------------------------------------------------------------ the simulator


class Fit:
    """A simulated fit: true median step times per mode (seconds), multiplicative noise, first calls."""

    def __init__(
        self,
        on=1e-3,
        off=1e-3,
        noise=0.03,
        steps=5000,
        first_on=0.01,
        first_off=0.01,
        default_on=False,
        factor=2.5,
        ahead=0.0,
        validation=0.0,
        seed=0,
        compile_seconds=0.3,
        known_first_call=None,
    ):
        self.times = {True: on, False: off}
        self.first = {True: first_on, False: first_off}
        self.noise, self.steps, self.ahead, self.validation = noise, steps, ahead, validation
        self.rng = random.Random(seed)
        self.trial = Trial(default_on, 0, factor, known_first_call)
        self.compile_seconds = compile_seconds
        self.modes: list = []
        self.seconds = 0.0

    def outlook(self, step):
        return Outlook(self.steps - step, self.ahead, self.validation)

    def run(self, until=None, pause_at=()):
        trial, fresh = self.trial, {True: True, False: True}
        for step in range(1, (until or self.steps) + 1):
            on = trial.on
            self.modes.append(on)
            if fresh[on]:  # the first call of this mode's function: trace (and compile)
                fresh[on] = False
                trial.called(self.first[on])
                if on:
                    trial.compiled([self.compile_seconds])
                self.seconds += self.first[on]
            else:
                seconds = self.times[on] * math.exp(self.rng.gauss(0, self.noise))
                trial.called(seconds)
                trial.add(step, seconds)
                self.seconds += seconds
            if step in pause_at:
                trial.pause(step)
            if step >= trial.next_check:
                trial.check(step, self.outlook(step))
        return trial.decision


class ShapeFit:
    """A simulated fit whose batches have shapes: ``epoch`` lists one epoch's batch shapes (replayed
    every epoch, as a Keras dataset is). XLA compiles each shape once (``compile_seconds`` on top of
    its step; its first call costs ``first_on``); the non-XLA function pays nothing per shape. The
    outlook is the one ``FastestRun`` builds: ``expected_compiles`` from the counts seen so far."""

    def __init__(
        self, epoch, epochs, on, off, compile_seconds, first_on, first_off=0.3, noise=0.03, seed=0, storm=None
    ):
        storm = storm or StormRule()
        self.shapes = list(epoch) * epochs
        self.times = {True: on, False: off}
        self.first = {True: first_on, False: first_off}
        self.compile_seconds, self.noise, self.rng = compile_seconds, noise, random.Random(seed)
        self.trial = Trial(False, 0, 2.0, storm=storm)
        self.storm = storm
        self.counts: dict = {}
        self.compiled: set = set()
        self.seconds = 0.0
        self.compiles = 0

    def outlook(self, step):
        left = len(self.shapes) - step
        soon = expected_compiles(self.counts, self.compiled, min(self.storm.window, left))
        return Outlook(left, expected_compiles(self.counts, self.compiled, left), 0.0, xla_compiles_soon=soon)

    def run(self):
        trial, fresh = self.trial, {True: True, False: True}
        for step, shape in enumerate(self.shapes, start=1):
            on = trial.on
            self.counts[shape] = self.counts.get(shape, 0) + 1
            steady = self.times[on] * math.exp(self.rng.gauss(0, self.noise))
            if fresh[on]:
                fresh[on] = False
                seconds = self.first[on]
                trial.called(seconds)
                if on:
                    self.compiled.add(shape)
                    self.compiles += 1
                    trial.compiled([0.5 * seconds])
            elif on and shape not in self.compiled:
                self.compiled.add(shape)
                self.compiles += 1
                seconds = steady + self.compile_seconds
                trial.called(seconds)
                trial.compiled([0.5 * self.compile_seconds])
                trial.new_shape_step(step, seconds, 1)
            else:
                seconds = steady
                trial.called(seconds)
                trial.add(step, seconds)
            self.seconds += seconds
            if step >= trial.next_check:
                trial.check(step, self.outlook(step))
        return trial.decision

    @classmethod
    def single_mode(cls, epoch, epochs, on, off, compile_seconds, first_on, first_off=0.3):
        """The whole fit in one mode, without noise: (seconds off, seconds on)."""
        shapes = list(epoch) * epochs
        distinct = len(set(shapes))
        return (
            first_off + (len(shapes) - 1) * off,
            first_on + (distinct - 1) * compile_seconds + (len(shapes) - 1) * on,
        )


@pytest.mark.parametrize(
    "on, off, default_on, kept, basis",
    [
        (0.5e-3, 1e-3, False, "on", "measured"),  # XLA 2x faster (CPU default off)
        (1.3e-3, 1e-3, False, "off", "measured"),  # XLA 1.3x slower
        (1.0e-3, 1.08e-3, False, "on", "measured"),  # XLA 8% faster, little noise
        (1.0e-3, 1.0e-3, False, "off", "within_noise"),
        (1.0e-3, 1.0e-3, True, "on", "within_noise"),  # within noise keeps the default (JAX: on)
        (0.25e-3, 20e-3, True, "on", "measured"),  # JAX: op by op 80x slower
    ],
)
def test_the_trial_keeps_the_truly_faster_mode(on, off, default_on, kept, basis):
    noise = 0.01 if abs(on - off) / min(on, off) < 0.1 else 0.05
    decision = Fit(on=on, off=off, default_on=default_on, noise=noise).run()
    assert (decision.mode, decision.basis) == (kept, basis), decision.why
    assert decision.steps_measured["on"] > 0 and decision.steps_measured["off"] > 0
    assert decision.medians["on"] == pytest.approx(on, rel=0.1)
    assert decision.medians["off"] == pytest.approx(off, rel=0.1)
    if basis == "within_noise":
        assert decision.ratio["rounds"] <= MAX_ROUNDS


@pytest.mark.parametrize("seed", range(8))
def test_a_noisy_tie_is_seldom_called_and_never_costs_much(seed):
    """Same true step time, 10% noise per step: whatever is kept, the fit costs what the default costs."""
    fit = Fit(on=1e-3, off=1e-3, noise=0.10, seed=seed)
    decision = fit.run()
    assert decision.basis in ("within_noise", "measured")
    assert decision.ratio is not None and (decision.basis == "within_noise" or decision.ratio["rounds"] >= 3)


def test_large_differences_are_decided_in_one_round_and_the_slow_mode_runs_few_steps():
    fit = Fit(on=0.25e-3, off=20e-3, default_on=True, noise=0.05)
    decision = fit.run()
    assert decision.mode == "on" and decision.ratio["rounds"] == 1
    slow_steps = sum(1 for on in fit.modes if not on)
    assert slow_steps <= 1 + jit_trial.WARMUP_STEPS + jit_trial.PEEK_STEPS  # the peek ended the off block early


def test_the_trial_costs_little_when_xla_is_slower():
    """The regret against a fit that never left the default: XLA's first call plus the slow blocks."""
    fit = Fit(on=1.5e-3, off=1e-3, noise=0.03, steps=20000, first_on=1.2)
    fit.run()
    default_only = Fit(on=1.5e-3, off=1e-3, noise=0.03, steps=20000)
    default_only.trial.decision = Decision(
        "off", "too_short", "", "off", {}, {}, {}, {}, 0.0, {}, None, None, 0, 0, 0, 0
    )
    default_only.run()
    assert fit.trial.decision.mode == "off"
    assert fit.seconds - default_only.seconds < 1.2 + 0.5e-3 * 3 * (fit.trial.block_steps + 8)


@pytest.mark.parametrize("steps, block", [(100000, 250), (20000, 81), (2000, BLOCK_STEPS)])
def test_blocks_last_a_quarter_second_within_a_tenth_of_the_fit(steps, block):
    fit = Fit(on=0.9e-3, off=1e-3, steps=steps, noise=0.2)
    fit.run(until=60)
    assert fit.trial.block_steps == pytest.approx(block, rel=0.1)  # 250 at the measured ~1 ms median


@pytest.mark.parametrize("seed", range(4))
def test_a_7_percent_gain_in_noisy_1ms_steps_is_found_in_a_long_fit(seed):
    """Steps of ~1 ms with a 20% spread (a small MLP on 2 cores): blocks of 8 steps hid this gain."""
    decision = Fit(on=0.93e-3, off=1e-3, steps=50000, noise=0.2, seed=seed).run()
    assert (decision.mode, decision.basis) == ("on", "measured"), decision.why


@pytest.mark.parametrize(
    "steps, first, basis",
    [
        (MIN_STEPS_LEFT // 2, 0.5, "too_short"),  # fewer steps left than a decision needs
        (5000, 60.0, "too_short"),  # the other mode's first call would cost > 3% of 5 s
    ],
)
def test_a_fit_too_short_keeps_the_default_and_never_switches(steps, first, basis):
    fit = Fit(on=0.5e-3, off=1e-3, steps=steps, first_off=first)
    decision = fit.run()
    assert (decision.mode, decision.basis, decision.switches) == ("off", basis, 0)
    assert not any(fit.modes) and "too short" in decision.why


def test_a_function_built_before_the_fit_is_priced_by_the_first_call_remembered_for_the_model():
    """A later fit of the same model does not trace at its first call: the model's remembered one counts."""
    fit = Fit(on=0.5e-3, off=1e-3, steps=5000, first_off=0.01, known_first_call=60.0)
    decision = fit.run()
    assert (decision.basis, decision.switches) == ("too_short", 0)
    assert Fit(on=0.5e-3, off=1e-3, steps=5000, first_off=0.01).run().mode == "on"


def test_varying_shapes_keep_xla_off_without_trying_it():
    decision = Fit(on=0.5e-3, off=1e-3, ahead=400).run()
    assert (decision.mode, decision.basis, decision.switches) == ("off", "shapes_vary", 0)


def test_xla_faster_but_repaid_by_no_one_keeps_it_off():
    """XLA's steps are faster, but the compiles it would still need cost more than they save."""
    decision = Fit(on=0.9e-3, off=1e-3, steps=3000, noise=0.01, ahead=1.5, compile_seconds=0.5).run()
    assert (decision.mode, decision.basis) == ("off", "compiles")
    assert decision.predicted_saving_seconds > 0


def test_the_decision_prices_the_rest_of_the_fit():
    fit = Fit(on=0.5e-3, off=1e-3, steps=10000, noise=0.02, validation=1.0, compile_seconds=0.3)
    decision = fit.run()
    left = decision.steps_left
    assert decision.mode == "on"
    assert decision.predicted_saving_seconds == pytest.approx(left * (1e-3 - 0.5e-3) - 1.0 * 0.3, rel=0.1)
    assert decision.trial_compile_seconds == pytest.approx(0.3)


def test_unknown_length_waits_for_the_first_epoch():
    trial = Trial(False, 0, 2.5)
    step = 0
    while step < 40:
        step += 1
        trial.called(1e-3)
        if step > 1:
            trial.add(step, 1e-3)
        if step >= trial.next_check:
            assert trial.check(step, Outlook(None, length_known_later=True)) is None
    assert trial.running and not trial.switch_steps
    trial.check(step, Outlook(None, length_known_later=False))
    assert trial.decision.basis == "length_unknown"


def test_validation_pauses_the_block_and_runs_the_default():
    fit = Fit(on=0.8e-3, off=1e-3, noise=0.01)
    fit.run(until=25)  # in the first XLA block
    trial = fit.trial
    assert trial.on and trial.running and len(trial.blocks) == 2
    assert trial.pause(25) is False  # back to the default for validation
    trial.add(26, 1e-3)  # the first train step after validation is not measured
    assert trial.check(26, fit.outlook(26)) is True  # then the paused mode again, a new block
    assert trial.blocks[-1].on and trial.blocks[-1].start == 27 and not trial.blocks[1].complete


def test_decision_round_trip_and_reuse():
    decision = Fit(on=0.5e-3, off=1e-3).run()
    again = Decision.from_dict(decision.to_dict())
    assert again == decision
    reused = decision.reused(4000)
    assert reused.basis == "reused" and reused.mode == decision.mode and reused.switches == 0
    assert "earlier fit" in reused.why


# ------------------------------------------------------------------ where it acts as 'keep'


@pytest.mark.parametrize(
    "facts, words",
    [
        (
            {
                "name": "MultiWorkerMirroredStrategy",
                "default": False,
                "replicas": 1,
                "multi_worker": True,
                "chief": True,
            },
            "under MultiWorkerMirroredStrategy with 1 replicas across workers",
        ),
        (
            {"name": "MirroredStrategy", "default": False, "replicas": 2, "multi_worker": False, "chief": True},
            "under MirroredStrategy with 2 replicas",
        ),
    ],
)
def test_tensorflow_fastest_acts_as_keep_where_only_one_mode_can_run(monkeypatch, facts, words):
    pytest.importorskip("tensorflow")
    from xla_keras.backends.tensorflow import _internals
    from xla_keras.backends.tensorflow.jit import JitController

    class Model:
        run_eagerly = False
        _jit_compile = False

    monkeypatch.setattr(_internals, "strategy_facts", lambda model: facts)
    controller = JitController("fastest")
    model = Model()
    assert controller.apply(model) is False
    assert controller.refusal.startswith("jit='fastest' acts as 'keep' " + words)
    assert model._jit_compile is False  # untouched


@pytest.mark.parametrize("replicas, multi_worker", [(2, True), (1, True), (2, False), (1, False)])
def test_jax_fastest_runs_its_trial_over_several_devices_and_processes(monkeypatch, replicas, multi_worker):
    """One process over several devices: one clock. Several processes: the chief's trial decides for all
    (callback/agreement.py). Neither acts as 'keep' any more."""
    from xla_keras.backends.jax import _internals
    from xla_keras.backends.jax.jit import JitController

    class Model:
        run_eagerly = False
        _jit_compile = True

    facts = {"name": "DataParallel", "default": False, "replicas": replicas, "multi_worker": multi_worker}
    monkeypatch.setattr(_internals, "distribution_facts", lambda: {**facts, "chief": True})
    monkeypatch.setattr(_internals, "layers_without_jit", lambda model: [])
    monkeypatch.setattr(_internals, "auto_jit", lambda model: True)
    controller = JitController("fastest")
    assert controller.apply(Model()) is False
    assert controller.refusal is None


def test_a_new_shape_is_priced_by_what_its_step_cost_not_by_the_compile_alone():
    trial = Trial(False, 0, 2.0)
    trial.on = True
    trial.samples[True].extend([0.004] * 10)
    trial.compiled([0.4])
    trial.new_shape_step(1, 1.004, 1)  # the step that compiled: trace, compile, probe and bookkeeping
    trial.new_shape_step(2, 2.004, 2)
    assert trial._compile_each() == pytest.approx(1.0)
    assert trial.compile_seconds == [0.4]  # the report's trial compile seconds stay XLA's own


# ------------------------------------------------------------------ shapes that vary, step by step


def _storm_epoch(batches=375, seed=0):
    """benchmarks/fastest.py's storm: each batch padded to the longest of 32 lengths drawn from 8..256."""
    rng = np.random.default_rng(seed)
    return [int(rng.integers(8, 257, size=32).max()) for _ in range(batches)]


@pytest.mark.parametrize("seed", range(4))
def test_a_storm_keeps_xla_off_without_trying_it_although_its_steps_are_twice_as_fast(seed):
    """~33 shapes per epoch with a long tail (Chao's estimate is low there), XLA 2x faster per step: its
    compiles cost more than all it saves in 3,000 steps, and the shapes predict a storm at the gate."""
    epoch = _storm_epoch(seed=seed)
    args = dict(epoch=epoch, epochs=8, on=3e-3, off=6e-3, compile_seconds=1.0, first_on=1.5)
    fit = ShapeFit(**args, seed=seed)
    decision = fit.run()
    off_only, on_only = ShapeFit.single_mode(**args)
    assert off_only < on_only
    assert (decision.mode, decision.basis, decision.switches, fit.compiles) == ("off", "shapes_vary", 0, 0)
    assert "recompilation storm" in decision.why and "storm_threshold=8" in decision.why
    assert fit.seconds <= 1.05 * off_only


def test_a_storm_the_gate_missed_costs_xla_s_first_call_only():
    """The storm rule loosened so the gate lets XLA in: the screen after XLA's first call stops it."""
    epoch = _storm_epoch()
    args = dict(epoch=epoch, epochs=8, on=3e-3, off=6e-3, compile_seconds=1.0, first_on=1.5)
    fit = ShapeFit(**args, storm=StormRule(threshold=10**6, window=200))
    fit.trial.one_time_factor = 0.01  # the gate's estimate of XLA's first call far too low
    decision = fit.run()
    off_only, _ = ShapeFit.single_mode(**args)
    assert (decision.mode, decision.basis, fit.compiles) == ("off", "shapes_vary", 1), decision.why
    assert "stopped after its first call" in decision.why
    assert fit.seconds <= off_only + 1.5 + 0.1


def test_few_shapes_xla_faster_keeps_it_on_and_the_watch_stays_quiet():
    """Five bucket shapes: XLA compiles each once, which the decision prices; it stays on."""
    epoch = [1, 2, 3, 4, 5] * 400
    args = dict(epoch=epoch, epochs=10, on=1e-3, off=2e-3, compile_seconds=0.5, first_on=1.0)
    fit = ShapeFit(**args)
    decision = fit.run()
    off_only, on_only = ShapeFit.single_mode(**args)
    assert (decision.mode, decision.basis, decision.revised_at_step) == ("on", "measured", None), decision.why
    assert fit.compiles == 5
    assert fit.seconds <= 1.05 * on_only < off_only


def test_shapes_that_start_varying_after_the_decision_turn_xla_off_again():
    """One shape for the first 10,000 steps (XLA kept on, 2x faster), then a new shape every step: the
    watch counts the compiles the decision never priced and returns to XLA off within a few steps."""
    epoch = [0] * 10000 + list(range(1, 10001))
    args = dict(epoch=epoch, epochs=1, on=1e-3, off=2e-3, compile_seconds=0.5, first_on=1.0)
    fit = ShapeFit(**args)
    decision = fit.run()
    off_only, on_only = ShapeFit.single_mode(**args)
    assert (decision.mode, decision.basis) == ("off", "compiles"), decision.why
    assert 10000 < decision.revised_at_step <= 10000 + 5
    assert decision.switch_steps[-1] == decision.revised_at_step
    assert "new shapes compiled" in decision.why and fit.compiles <= 1 + 5
    assert fit.seconds < off_only < on_only


# ------------------------------------------------------------------ JAX: samples are intervals


def test_under_jax_a_sample_is_an_interval_past_the_blocks_settling_steps():
    from types import SimpleNamespace

    from xla_keras.core.timing import DrainedInterval

    trial = Trial(True, 0, 10.0)
    block = trial.blocks[0]  # block 0: the first call and WARMUP_STEPS are not measured
    settle = block.start + block.skip
    stats = SimpleNamespace(step=0, interval=DrainedInterval())
    assert trial.sample_due(stats, 0.0)  # each settling step ends with a drain: the measured part starts clean
    stats.step = settle - 1
    stats.interval.open_at(10.0, stats.step)
    assert not trial.sample_due(stats, 10.0 + jit_trial.TRIAL_SAMPLE_SECONDS / 2)
    assert trial.sample_due(stats, 10.0 + 1.01 * jit_trial.TRIAL_SAMPLE_SECONDS)
    trial.add_interval(settle - 1, 0.004, 3)  # reaches into the settling steps: not this block's sample
    trial.add_interval(settle + 4, 0.002, 5)
    trial.add_interval(settle + 9, 0.003, 5)
    assert block.values == [0.002, 0.003] and block.steps == 10 and trial.steps_measured[True] == 10
    on = spread(trial.samples[True], trial.steps_measured[True])
    assert (on.n, on.steps) == (2, 10)  # the notch counts samples; the words count steps


# ------------------------------------------------------------------ "too short": the words against the rule

_NEEDED = re.compile(r"a decision needs at least (\d+) \(.*\): a fit of (\d+) train steps or more")


def _gate(steps_left, one_time, step=1e-3, done=14):
    return keep_default_reason(
        Outlook(steps_left), StormRule(), False, one_time, step, MIN_STEPS_LEFT, jit_trial.TRIAL_BUDGET, done
    )


def _fewest_steps_the_rule_lets_decide(one_time, step=1e-3):
    """The rule's own outcome, step by step: the fewest steps left it does not call too short."""
    n = 0
    while _gate(n, one_time, step) is not None:
        n += 1
    return n


@pytest.mark.parametrize(
    "one_time",
    [
        0.01,  # a cheap trial: the steps bind (1000)
        0.036,  # 36 ms against 3% of 1 ms steps: 1200 steps left bind
        1.25,  # 1.25 s: 41,667 steps left bind
    ],
)
@pytest.mark.parametrize("steps_left", [999, 1000, 1100, 100_000])
def test_too_short_words_give_the_steps_the_rule_needs(steps_left, one_time):
    """Each fit the rule calls too short names the fewest steps left it would not: the steps and the trial's
    share of the time left both, never one of them alone (1000 steps said, then a fit of 1,100 too short)."""
    fewest = _fewest_steps_the_rule_lets_decide(one_time)
    assert fewest >= MIN_STEPS_LEFT
    reason = _gate(steps_left, one_time)
    assert (reason is None) == (steps_left >= fewest)
    if reason is None:
        return
    basis, words = reason
    assert basis == "too_short" and f"too short to decide: {steps_left} train steps left after its first 14" in words
    needed, fit = map(int, _NEEDED.search(words).groups())
    assert needed == fewest and fit == 14 + fewest  # the figure that holds: the rule decides from there on
    assert _gate(needed, one_time) is None and _gate(needed - 1, one_time) is not None
    assert f"{MIN_STEPS_LEFT} or more" in words and "at most 3% of the time left at ~1 ms a step" in words  # both


@pytest.mark.parametrize("first_off", [0.004, 0.5])  # one-time cost: 10 ms (the steps bind) or 1.25 s (the time)
def test_a_fit_as_long_as_the_words_say_decides(first_off):
    """The simulated fit, end to end: a fit of the length the too-short words give passes the gate (the trial
    runs and decides on the measured steps); one step shorter is too short again."""
    short = Fit(on=0.5e-3, off=1e-3, steps=1100, first_off=first_off, noise=0.0)
    decision = short.run()
    assert decision.basis == "too_short" if first_off == 0.5 else decision.basis == "measured"
    if decision.basis != "too_short":
        short = Fit(on=0.5e-3, off=1e-3, steps=999, first_off=first_off, noise=0.0)
        decision = short.run()
        assert decision.basis == "too_short"
    total = int(_NEEDED.search(decision.why).group(2))
    assert Fit(on=0.5e-3, off=1e-3, steps=total, first_off=first_off, noise=0.0).run().basis == "measured"
    assert Fit(on=0.5e-3, off=1e-3, steps=total - 1, first_off=first_off, noise=0.0).run().basis == "too_short"
