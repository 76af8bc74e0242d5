"""The report's figures in words, each with what it rests on: the compile time with every compile
the monitored calls made, the steady step with its step count, and the comparisons of steady steps
(a fallback's before and after, a break-even), withheld below ``MIN_COMPARE_STEPS`` a side. One
place for the summary, ``str(report)``, the Text tab and the XLA tab's cards. Pure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from xla_keras.core.timing import comparable, ms_text, share, too_few_words
from xla_keras.core.types import PHASES

if TYPE_CHECKING:
    from xla_keras.report.model import XlaReport

_OTHER_PARTS = (("in_steps", "op by op inside the steps"), ("outside_steps", "outside the steps"))


def all_compile_seconds(report: XlaReport) -> float:
    """Every XLA compile of the monitored calls: the step programs' and, on JAX, the executables
    compiled op by op inside the steps and outside them (``report.other_compilations``)."""
    return report.compile_seconds + sum(
        float(report.other_compilations.get(kind, {}).get("seconds", 0.0)) for kind, _ in _OTHER_PARTS
    )


def compile_time_words(report: XlaReport) -> Tuple[str, str, str]:
    """The compile-time headline as (total, its share of the monitored time, its parts): e.g.
    ``("10.3 s", " = 80% of 12.9 s monitored", " (1.98 s the step programs, 8.34 s op by op inside
    the steps: 289 executables)")``; the share and the parts are empty when there are none."""
    total = all_compile_seconds(report)
    parts = []
    for kind, words in _OTHER_PARTS:
        other = report.other_compilations.get(kind) or {}
        if other.get("count"):
            parts.append(f"{ms_text(float(other.get('seconds', 0.0)))} {words}: {int(other['count'])} executables")
    of_wall = share(total, report.wall_seconds) if parts else report.compile_share
    share_words = f" = {of_wall:.0%} of {ms_text(report.wall_seconds)} monitored" if of_wall is not None else ""
    detail = f" ({ms_text(report.compile_seconds)} the step programs, {', '.join(parts)})" if parts else ""
    return ms_text(total), share_words, detail


STEADY_WINDOW = 1024  # core.timing.PhaseTiming's window: the steps a median is taken over, the latest


def steady_words(report: XlaReport, phase: str) -> Optional[str]:
    """A phase's steady step with how it was measured and the steps it rests on, e.g. ``"1.06 ms (81 steps,
    2 runs)"``, ``"33.1 ms (between drains: 380 steps, 12 intervals)"``, ``"1.02 ms (median of 40 steps)"``
    (steps timed one by one, before a run's end), ``"withheld (...)"``; None when not measured."""
    timing = report.step_timing.get(phase) or {}
    seconds = report.steady_step_seconds_by_phase.get(phase)
    if seconds is None:
        withheld = timing.get("withheld")
        return f"withheld ({withheld})" if withheld else None
    count = report.steady_step_counts.get(phase) or 0
    basis, intervals = timing.get("basis"), timing.get("intervals") or 0
    if basis == "between_drains":
        return f"{ms_text(seconds)} (between drains: {count} steps, {intervals} interval{'s' * (intervals != 1)})"
    if intervals:  # TensorFlow: each run's wall time per steady step
        return f"{ms_text(seconds)} ({count} steps, {intervals} run{'s' * (intervals != 1)})"
    if basis == "dispatch":
        return f"{ms_text(seconds)} (a dispatch time, not a step time: JAX report of xla_keras before 0.4)"
    if not count:
        return ms_text(seconds)
    last = "the last " if count >= STEADY_WINDOW else ""  # a long fit: the median of its latest steps
    return f"{ms_text(seconds)} (" + ("1 step" if count == 1 else f"median of {last}{count} steps") + ")"


def dispatch_timed(report: XlaReport) -> bool:
    """A JAX report of schema 9 or older: its step times are dispatch times, not step times."""
    return any((t or {}).get("basis") == "dispatch" for t in report.step_timing.values())


_WHERE = {"input": "waiting for input", "between_steps": "between steps", "step": "in the step"}


def slow_words(report: XlaReport) -> str:
    """The slow steps in words: how many, against what, how they were timed and where their time went."""
    host = any(s.basis == "host" for s in report.slow_steps)
    timed = " (timed on the host: the loop's own time on each, JAX dispatches asynchronously)" if host else ""
    where: Dict[str, int] = {}
    for slow in report.slow_steps:
        if slow.where in _WHERE:
            where[slow.where] = where.get(slow.where, 0) + 1
    sat = ", ".join(f"{n} {_WHERE[w]}" for w, n in sorted(where.items(), key=lambda item: -item[1]))
    return f"{report.slow_step_count} known-signature steps far above the steady step{timed}" + (
        f" ({sat})" if sat else ""
    )


# A finding (a summary line) when the input pipeline's wait is at least this share of the monitored time, and
# this many seconds; the same for the time runs took to start (before their first step).
INPUT_WAIT_SHARE = 0.05
INPUT_WAIT_SECONDS = 0.2
RUN_START_SHARE = 0.05
RUN_START_SECONDS = 0.5


def precompile_words(report: XlaReport) -> Optional[str]:
    """What the phases compiled before their first step and after it, in words (None: no precompile)."""
    parts, after = [], 0
    for phase in PHASES:
        facts = report.precompile.get(phase)
        if not facts:
            continue
        if facts.get("withheld"):
            parts.append(f"{phase} none ({facts['withheld']})")
            continue
        threads = facts.get("threads") or 1
        cached = f", {facts['cached']} from the cache" if facts.get("cached") else ""
        already = facts.get("already") or 0
        if facts["signatures"]:
            parts.append(
                f"{phase} {facts['signatures']} signature{'s' * (facts['signatures'] != 1)} in "
                f"{ms_text(facts['seconds'])} on {threads} thread{'s' * (threads != 1)}{cached}"
                + (f" ({already} compiled before)" if already else "")
            )
        else:
            parts.append(f"{phase} {already} signature{'s' * (already != 1)} compiled in an earlier call")
        after += facts.get("in_loop", 0)
    if not parts:
        return None
    compiled = any(not report.precompile[p].get("withheld") for p in report.precompile)
    loop = f" before step 1; {after} compile{'s' * (after != 1)} in the loop" if compiled else ""
    return ", ".join(parts) + loop


def waits_words(report: XlaReport, phase: str) -> Optional[str]:
    """What ``phase`` waited for outside its steps, in words (None: nothing worth a line)."""
    waits = report.waits.get(phase)
    if not waits:
        return None
    parts = []
    if waits.get("input_seconds", 0.0) >= 0.001:
        parts.append(
            f"input pipeline {ms_text(waits['input_seconds'])} ({waits.get('input_share', 0.0):.0%} of the monitored "
            f"time; longest {ms_text(waits.get('longest_input', 0.0))})"
        )
    if waits.get("run_starts"):
        run = "epoch" if phase == "train" else "run"
        parts.append(
            f"{run} starts {ms_text(waits['run_start_seconds'])} over {waits['run_starts']} {run}s (longest "
            f"{ms_text(waits.get('longest_run_start', 0.0))}, before step {waits.get('longest_run_start_step')})"
        )
    return f"{phase}: " + "; ".join(parts) if parts else None


def wait_findings(report: XlaReport) -> List[str]:
    """The waits worth a finding: the input pipeline's share of the time, and slow starts of runs."""
    out = []
    for phase, waits in report.waits.items():
        seconds, part = waits.get("input_seconds", 0.0), waits.get("input_share", 0.0)
        if seconds >= INPUT_WAIT_SECONDS and part >= INPUT_WAIT_SHARE:
            out.append(
                f"{phase} waited {ms_text(seconds)} = {part:.0%} of the time for its input pipeline (tf.data: "
                "prefetch(tf.data.AUTOTUNE), cache(), map(..., num_parallel_calls=tf.data.AUTOTUNE))"
            )
        starts = waits.get("run_start_seconds", 0.0)
        if starts >= RUN_START_SECONDS and report.wall_seconds and starts / report.wall_seconds >= RUN_START_SHARE:
            run = "epochs" if phase == "train" else "runs"
            longest = ms_text(waits.get("longest_run_start", 0.0))
            out.append(
                f"{phase}: {run} took {ms_text(starts)} to start (longest {longest} before step "
                f"{waits.get('longest_run_start_step')}): Keras makes each epoch's data iterator and releases the "
                "last one there; no step's time"
            )
    return out


def own_words(report: XlaReport) -> Optional[str]:
    """The monitor's own work in words: its total and its parts, kept out of every step figure."""
    own = report.own_seconds
    if not own or own.get("total", 0.0) < 0.0005:
        return None
    names = {"traces": "traces", "writes": "writes", "cost": "cost analysis", "probes": "compile probes"}
    parts = ", ".join(f"{names[k]} {ms_text(own[k])}" for k in names if own.get(k, 0.0) >= 0.0005)
    return f"{ms_text(own['total'])} ({parts}), outside every step figure"


NO_STEADY_AFTER = "each step or interval since the switch held a compile, a stall or the monitor's own work"


def fallback_cost(fallback: Dict[str, Any]) -> Optional[str]:
    """What running without XLA cost after a storm fallback: each phase's steady step after the
    switch against its steady XLA step before it, with the steps each side rests on; the ratio only
    when both sides have ``MIN_COMPARE_STEPS`` steady steps."""
    before = fallback.get("xla_steady_step_seconds") or {}
    after = fallback.get("steady_step_seconds_after") or {}
    n_before = fallback.get("xla_steady_steps") or {}
    n_after = fallback.get("steady_steps_after") or {}
    parts = []
    for phase in PHASES:
        new, old = after.get(phase), before.get(phase)
        if new is None:
            ran = (fallback.get("steps_after") or {}).get(phase, 0)
            if ran:
                parts.append(f"{phase}: {ran} steps without XLA, no steady step among them ({NO_STEADY_AFTER})")
            continue
        without = f"{phase} steady step {ms_text(new)} without XLA ({n_after.get(phase, 0)} steps)"
        if old is None:
            parts.append(f"{without}; no steady XLA step before the switch (every XLA step had compiled)")
        elif comparable(n_before.get(phase), n_after.get(phase)):
            parts.append(
                f"{without} vs {ms_text(old)} with XLA before the switch ({n_before.get(phase)} steps): "
                f"{new / old:.1f}x as long without XLA"
            )
        else:
            sides = f"{n_before.get(phase, 0)} with XLA before the switch, {n_after.get(phase, 0)} without"
            parts.append(f"{without}; {too_few_words(sides)}")
    return "; ".join(parts) or None


def break_even_words(report: XlaReport) -> str:
    """The break-even in words, with the steps behind each side when jit='fastest' measured them."""
    decision = report.jit_decision or {}
    steps = decision.get("steps_measured") or {}
    medians = decision.get("medians") or {}
    measured = medians.get("on") is not None and medians.get("off") is not None
    behind = f" (steady steps: XLA on {steps.get('on', 0)}, off {steps.get('off', 0)})" if measured else ""
    if report.break_even_steps is not None:
        return f"{report.break_even_steps:.0f} steps{behind}"
    if decision and not measured:
        seen = [f"XLA {m} ({steps.get(m, 0)} steady steps)" for m in ("on", "off") if medians.get(m) is not None]
        return f"unknown: jit='fastest' measured only {seen[0]}" if seen else "unknown: no mode measured yet"
    if not measured:
        return "unknown (no non-XLA baseline measured)"
    if not comparable(steps.get("on"), steps.get("off")):
        return too_few_words(f"XLA on {steps.get('on', 0)}, off {steps.get('off', 0)}")
    return f"never: XLA's steady steps were not faster than without it (jit='fastest' measured both){behind}"


def decision_lines(decision: Optional[Dict[str, Any]]) -> List[str]:
    """jit='fastest' in a few lines: the mode kept and why, then the evidence with its step counts."""
    if not decision:
        return []
    medians, spreads = decision.get("medians") or {}, decision.get("spreads") or {}
    steps = decision.get("steps_measured") or {}
    kept = decision.get("mode")
    lines = [f"XLA {kept.upper()} kept ({decision.get('basis')})" if kept else "measuring (no decision yet)"]
    measured = [
        f"XLA {m}: median {ms_text(medians.get(m))} (IQR {ms_text(spreads.get(m))}) over {steps.get(m, 0)} steps"
        for m in ("on", "off")
        if medians.get(m) is not None
    ]
    if measured:
        lines.append("; ".join(measured))
    cost = [f"trial compiles {ms_text(decision.get('trial_compile_seconds') or 0.0)}"]
    saving = decision.get("predicted_saving_seconds")
    if saving is not None:
        cost.append(f"predicted saving {ms_text(saving)} over the {decision.get('steps_left')} steps left")
    if decision.get("switches"):
        cost.append(f"{decision['switches']} switches")
    if decision.get("revised_at_step") is not None:
        cost.append(f"XLA off again from train step {decision['revised_at_step']} (compiles beyond the price)")
    lines.append(", ".join(cost))
    return lines


def op_by_op_words(report: XlaReport) -> Optional[str]:
    """JAX after a storm fallback: what the op-by-op compiles since the switch cost, against XLA's
    compile per shape measured before it (an estimate of what XLA would have cost for the shapes
    first seen after the switch); None elsewhere."""
    fallback = report.fallback
    ops = report.other_compilations.get("in_steps") or {}
    if not fallback or report.backend != "jax" or not ops.get("count"):
        return None
    phase = fallback.get("phase", "train")
    compiled = [c.seconds for c in report.compilations if c.phase == phase]
    if not compiled:
        return None
    per_shape = sum(compiled) / len(compiled)
    new_after = max(0, report.distinct_signatures.get(phase, 0) - report.compilation_count.get(phase, 0))
    xla_would = new_after * per_shape
    op_seconds = float(ops.get("seconds", 0.0))
    verdict = "more than XLA's compiles would have" if op_seconds > xla_would else "less than XLA's would have"
    return (
        f"after the switch JAX ran the steps op by op and compiled {int(ops['count'])} executables in "
        f"{ms_text(op_seconds)} (every shape again, one per operation); XLA had compiled each of its "
        f"{len(compiled)} {phase} shapes in {ms_text(per_shape)} and would have needed about "
        f"{ms_text(xla_would)} for the {new_after} new since (estimated): the fallback cost {verdict}"
    )


def processes_words(report: XlaReport) -> Optional[str]:
    """Several processes: how many, and each one's compiles (and their time) per phase, in words."""
    rows = report.processes
    if len(rows) < 2:
        return None

    def each(key: str, phase: str) -> List[Any]:
        return [row.get(key, {}).get(phase, 0) for row in rows]

    phases = [p for p in PHASES if any(each("steps", p)) or any(each("compilation_count", p))]
    parts = [
        f"{p} "
        + ", ".join(str(n) for n in each("compilation_count", p))
        + " ("
        + ", ".join(ms_text(s) for s in each("compile_seconds", p))
        + ")"
        for p in phases
    ]
    return f"{len(rows)}, compiles per process in order: " + ("; ".join(parts) or "none")


def quantity(value: Optional[float], unit: str) -> str:
    """``1.19 MFLOP``, ``160 kB``: three significant digits and an SI prefix; ``n/a`` when unknown."""
    if value is None:
        return "n/a"
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def cost_words(report: XlaReport) -> Optional[str]:
    """Per phase whose steps ran an analysed program: its FLOPs per step (their mean over the steps, with
    several programs), memory, and achieved rates with the steady steps they rest on (``report.costs``);
    None when no program was analysed."""
    parts = []
    for phase in PHASES:
        rates = report.costs.get(phase)
        if not rates:
            continue
        if rates.get("flops_per_step") is None:
            words = f"{phase} FLOPs unknown"
        else:
            words = f"{phase} {quantity(rates['flops_per_step'], 'FLOP')}/step"
            if (rates.get("programs") or 1) > 1:  # the mean over the steps: each program once per step it ran
                words += f" (mean of {rates['programs']} programs)"
        if rates.get("peak_bytes") is not None:
            words += f", {quantity(rates['peak_bytes'], 'B')} peak memory"
        if rates.get("flops_per_second") is not None:
            words += f", {quantity(rates['flops_per_second'], 'FLOP/s')} over {rates['steady_steps']} steady steps"
            if rates.get("mfu") is not None:
                words += f" (MFU {rates['mfu']:.1%})"
        else:
            words += f" (rates withheld: {rates.get('rates_withheld') or 'no steady step'})"
        parts.append(words)
    return "; ".join(parts) or None
