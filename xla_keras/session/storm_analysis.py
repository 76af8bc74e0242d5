"""Storm advice: the cause read off the shapes seen, the fix computed from them, and what it
saves, measured on real lengths where the batches allow it.

Pure (no TensorFlow). The fix is a typed record (``storms.fixes.Fix``) that ``xla_keras.data.apply_fix``
applies (``fix.code`` is the same call as one line). Padding is counted in elements over every axis a
fix pads. Real-length figures and the bucketing alternative: ``storms.lengths``; images, whose
zero-padding changes the outputs: ``storms.images``; the partial last batch: ``storms.fixes``; the compile
budget: ``storms.budget``;
what the session asks (``StormAnalysis``, with the facts of the call handed in: ``CallFacts``) and
batches already fixed (``already_fixed``): below.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import TYPE_CHECKING, Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from xla_keras.core.signatures import InputSignature
from xla_keras.core.types import KNOWN_SIGNATURE_CAUSES, MEASURED
from xla_keras.session.phases import CallBase
from xla_keras.storms.buckets import TARGET_PADDING_OVERHEAD, best_buckets, pad_to_boundary
from xla_keras.storms.budget import PhaseAdvice, budget_text, over_budget
from xla_keras.storms.detection import (
    ShapeHistory,
    Storm,
    VaryingAxis,
    batch_rows,
    partial_batch_signatures,
    structures_differ,
    varying_axes,
)
from xla_keras.storms.fixes import (
    REMAINDER,
    AppliedLengths,
    ConsistentStructure,
    DropRemainder,
    Fix,
    FixedBatchSize,
    PadRemainder,
    PadToLengths,
    Remainder,
    StaticValue,
    UnknownFix,
    apply_code,
    batch_size_call,
    compiles_words,
    fix_value,
    recomputed_words,
)
from xla_keras.storms.images import axes_words, by_size, changed_values, image_inputs, resize
from xla_keras.storms.lengths import (
    Costs,
    SampleView,
    real_length_figures,
)

if TYPE_CHECKING:
    from xla_keras.config import MonitorConfig
    from xla_keras.session.phases import PhaseStats


def _padded_keys(a: VaryingAxis) -> List[Tuple[str, int]]:
    """(path, axis) of the varying axis and of the axes that vary with it (another replica's view aside)."""
    keys = [(a.path, a.axis)]
    for other in a.also:
        path, axis = other.rsplit(":", 1)
        if "@" not in path:
            keys.append((path, int(axis)))
    return keys


def _axis_index(axes: Sequence[VaryingAxis]) -> Dict[Tuple[str, int], int]:
    """(path, axis) of every leaf axis a fix pads (co-varying ones too) -> the varying axis it follows."""
    index: Dict[Tuple[str, int], int] = {}
    for i, a in enumerate(axes):
        for key in _padded_keys(a):
            index.setdefault(key, i)
    return index


def _power(a: VaryingAxis) -> int:
    """Axes of the leaf that take ``a``'s length together (an image's height and width: 2)."""
    return 1 + sum(1 for other in a.also if other.rsplit(":", 1)[0] == a.path)


def padded_elements(
    axes: Sequence[VaryingAxis], signatures: Sequence[Tuple[InputSignature, int]], buckets: Sequence[Sequence[int]]
) -> Tuple[int, int]:
    """(elements as fed, elements once padded) of every leaf the fix pads, over the batches seen: the
    padding of all its axes counted together (an image padded on height and width grows by the product)."""
    index = _axis_index(axes)
    real = padded = 0
    for sig, n in signatures:
        for leaf in sig:
            hits = {axis: index[(leaf.path, axis)] for axis in range(len(leaf.shape)) if (leaf.path, axis) in index}
            sizes = [size for size in leaf.shape if size is not None]
            if not hits or len(sizes) < len(leaf.shape):
                continue  # an unknown size: its elements cannot be counted
            fed = grown = n
            for axis, size in enumerate(sizes):
                fed *= size
                grown *= pad_to_boundary(size, buckets[hits[axis]]) if axis in hits else size
            real, padded = real + fed, padded + grown
    return real, padded


def choose_buckets(
    axes: List[VaryingAxis], signatures: Sequence[Tuple[InputSignature, int]], max_compiles: int
) -> Tuple[List[List[int]], float, int]:
    """Bucket each varying axis so the joint number of padded signatures stays
    below ``max_compiles``: start with one bucket each and add buckets where
    they save the most padding while padding is above the target. Padding is
    counted in elements over every leaf and axis the fix pads, together."""
    ks = [1] * len(axes)
    buckets = [best_buckets(a.known_values, 1, power=_power(a))[0] for a in axes]

    def joint(bk):
        combos = set()
        index = {(a.path, a.axis): i for i, a in enumerate(axes)}
        for sig, _ in signatures:
            combo = []
            for leaf in sig:
                for axis, size in enumerate(leaf.shape):
                    i = index.get((leaf.path, axis))
                    if i is not None and size is not None:
                        combo.append(pad_to_boundary(size, bk[i]))
            combos.add(tuple(combo))
        return max(1, len(combos))

    def overhead(bk):
        real, padded = padded_elements(axes, signatures, bk)
        return padded / real - 1 if real else 0.0

    while overhead(buckets) > TARGET_PADDING_OVERHEAD:
        options = []
        for i, a in enumerate(axes):
            trial = list(buckets)
            trial[i] = best_buckets(a.known_values, ks[i] + 1, power=_power(a))[0]
            if len(trial[i]) == len(buckets[i]):
                continue  # no more distinct lengths to split on
            if joint(trial) < max_compiles:
                options.append((overhead(trial), i, trial))
        if not options:
            break
        _, i, buckets = min(options)
        ks[i] += 1
    return buckets, overhead(buckets), joint(buckets)


# ------------------------------------------------------------------ analysis


def analyse(
    phase: str,
    history: ShapeHistory,
    threshold: int,
    data: str = "tf.data",
    view: Optional[SampleView] = None,
    costs: Optional[Costs] = None,
    layers: Sequence[str] = (),
    applied: Sequence[AppliedLengths] = (),
) -> Tuple[List[Dict[str, Any]], str, Fix]:
    """Cause, advice and fix from everything the phase has seen. ``data``: "tf.data", or
    "arrays" (numpy arrays Keras batches itself, on either backend): the fix's code then
    needs no TensorFlow ("pydataset", "generator": likewise). ``view``: sampled batches to measure real lengths on.
    ``layers``: the model's layer classes (empty: not read); ``applied``: the fixes ``xla_keras.data``
    applied in this process.

    Returns (varying, advice text without the header line, fix)."""
    partial = partial_batch_signatures(history)
    remainder = last_batch_remainder(phase, history, partial)
    sigs = [(sig, history.batches.get(fp, 1)) for fp, sig in history.signatures.items() if fp not in partial]
    axes = varying_axes(sigs)
    batch_axes = [a for a in axes if a.axis == 0]
    length_axes = [a for a in axes if a.axis != 0]
    varying = [a.describe() for a in axes]
    partial_text = remainder.text(phase) if remainder else ""
    batch_size = None
    if sigs:
        batch_size = batch_rows(max(sigs, key=lambda t: t[1])[0])
    rows_fix = {"batch_size": batch_size, "remainder": REMAINDER[phase] if batch_size else None}
    if length_axes:
        facts = PadFacts(history, threshold, data, view, costs, tuple(layers), tuple(applied))
        return varying, *_pad_advice(phase, length_axes, batch_axes, sigs, rows_fix, partial_text, facts)
    if batch_axes:
        a = batch_axes[0]
        d = a.describe()
        size = max(a.values, key=lambda v: (a.values[v], v))
        batch_fix = FixedBatchSize(
            path=a.path,
            size=size,
            batch_size=size,
            remainder=REMAINDER[phase],
            drop_remainder=REMAINDER[phase] == "drop",
        )
        fix: Fix = dataclasses.replace(batch_fix, code=apply_code(batch_fix, data), data=data)
        rest = (
            "drops the last partial batch"
            if REMAINDER[phase] == "drop"
            else "pads the last batch's rows, which weigh nothing"
        )
        arrays = f" (arrays: `{batch_size_call(phase, size)}`)" if data == "arrays" else ""
        advice = (
            f"The batch size varies (input '{a.path}' axis 0: {d['min']}..{d['max']}, "
            f"{d['n_values']} values). Fix: batch to a fixed size of {size} (the most frequent batch size "
            "seen, the largest on a tie): "
            f"`xla_keras.data.apply_fix(data, fix)` re-batches and {rest} (1 compile){arrays}, or "
            "switch XLA off for this model."
        )
        return varying, advice, fix
    if structures_differ(sigs):
        fix = ConsistentStructure()
        advice = (
            "The inputs change structure or dtype between batches (leaves appear, vanish or change "
            "dtype or rank): each variant compiles. Fix: feed every batch with the same structure "
            "and dtypes (cast in the input pipeline)."
        )
        return varying, advice, fix
    if remainder:
        kind = DropRemainder if REMAINDER[phase] == "drop" else PadRemainder
        rows = kind(rows=remainder.rows, batch_size=remainder.batch_size, remainder=REMAINDER[phase])
        fix = dataclasses.replace(rows, code=apply_code(rows, data), data=data)
        return varying, partial_text.strip() + arrays_words(phase, remainder.batch_size, data), fix
    return varying, "New signatures kept arriving but no single input explains them.", UnknownFix()


def arrays_words(phase: str, batch_size: int, data: str) -> str:
    """For arrays, which Keras batches itself: how to get the batches a fix applies to."""
    if data != "arrays":
        return ""
    rows = "x[i:i + {b}]" if phase == "predict" else "(x[i:i + {b}], y[i:i + {b}])"
    return (
        " Keras batches arrays itself: slice them into batches first (`batches = ["
        + rows.format(b=batch_size)
        + f" for i in range(0, len(x), {batch_size})]`), then apply the fix to `batches`."
    )


class PadFacts(NamedTuple):
    """What the pad advice reads besides the shapes' causes: the phase's history and settings, and the
    facts handed in (the data's kind, the model's layer classes, the fixes applied in this process)."""

    history: ShapeHistory
    threshold: int
    data: str
    view: Optional[SampleView]
    costs: Optional[Costs]
    layers: Tuple[str, ...]
    applied: Tuple[AppliedLengths, ...]


def applied_fix(axes: Sequence[VaryingAxis], applied: Sequence[AppliedLengths]) -> Optional[AppliedLengths]:
    """The latest fix applied in this process whose lengths every varying axis takes (each value one of
    the lengths its target takes after that fix), or None: the shapes are that fix's output."""
    for fix in reversed(applied):
        tables = {(path, axis): set(lengths) for path, axis, lengths in fix.targets}
        if all(
            a.known_values and all(set(a.known_values) <= tables.get(key, set()) for key in _padded_keys(a))
            for a in axes
        ):
            return fix
    return None


def _taken(fix: AppliedLengths, axes: Sequence[VaryingAxis]) -> str:
    """An applied fix's lengths on the axes that vary here."""
    varying = {key for a in axes for key in _padded_keys(a)}
    return "; ".join(
        f"'{path}' axis {axis}: {list(lengths)}" for path, axis, lengths in fix.targets if (path, axis) in varying
    )


def already_fixed(history: ShapeHistory, fix: Fix, applied: Sequence[AppliedLengths] = ()) -> bool:
    """The batches are already what a pad fix would make of them: their lengths are those of a fix
    applied in this process, or the fix would pad nothing and change no rows (its lengths are the
    lengths seen, one batch size, no partial batch). Advice to apply it again is none."""
    if not isinstance(fix, PadToLengths):
        return False
    partial = partial_batch_signatures(history)
    sigs = [(sig, history.batches.get(fp, 1)) for fp, sig in history.signatures.items() if fp not in partial]
    axes = varying_axes(sigs)
    length_axes = [a for a in axes if a.axis != 0]
    if not length_axes:
        return False
    if applied_fix(length_axes, applied) is not None:
        return True
    if partial or len(length_axes) < len(axes):
        return False  # the fix would still change the rows
    lengths = {(t["path"], t["axis"]): set(t["lengths"]) for t in fix.targets or []}
    return all(set(a.known_values) <= lengths.get((a.path, a.axis), set()) for a in length_axes)


def _pad_advice(
    phase: str,
    length_axes: List[VaryingAxis],
    batch_axes: List[VaryingAxis],
    sigs: Sequence[Tuple[InputSignature, int]],
    rows_fix: Dict[str, Any],
    partial_text: str,
    facts: PadFacts,
):
    threshold, data = facts.threshold, facts.data
    buckets, overhead, compiles = choose_buckets(length_axes, sigs, threshold)
    first = length_axes[0]
    targets = []
    for a, b in zip(length_axes, buckets):
        targets.append({"path": a.path, "axis": a.axis, "lengths": b})
        for other in a.also:  # co-varying leaves (e.g. a mask) get the same lengths
            other_path, other_axis = other.rsplit(":", 1)
            if "@" not in other_path:
                targets.append({"path": other_path, "axis": int(other_axis), "lengths": b})
    fix = PadToLengths(
        path=first.path,
        axis=first.axis,
        lengths=buckets[0],
        targets=targets,
        **rows_fix,
        drop_remainder=rows_fix["remainder"] == "drop",
        padding_overhead=round(overhead, 4),
        compiles=compiles,
        per_input=(
            [{"path": a.path, "axis": a.axis, "lengths": b} for a, b in zip(length_axes, buckets)]
            if len(length_axes) > 1
            else None
        ),
    )
    fix = dataclasses.replace(fix, code=apply_code(fix, data), data=data)

    def together(a: VaryingAxis) -> str:  # co-varying leaves, kept as "path:axis" in the fix's varying list
        named = (f"'{o.rsplit(':', 1)[0]}' axis {o.rsplit(':', 1)[1]}" for o in a.also)
        return f" (with {', '.join(named)})" if a.also else ""

    names = "; ".join(
        f"input '{a.path}' axis {a.axis}{together(a)} varies ({d['min']}..{d['max']}, {d['n_values']} values)"
        for a, d in zip(length_axes, (a.describe() for a in length_axes))
    )
    pad_targets = "; ".join(f"'{a.path}' axis {a.axis} to {b}" for a, b in zip(length_axes, buckets))
    rows = (
        ("batch to a fixed size" if rows_fix["remainder"] == "drop" else "keep every example")
        if rows_fix["batch_size"]
        else "batch to a fixed size"
    )
    bucketable = len(length_axes) == 1 and first.axis >= 1 and phase != "predict"  # predict: order matters
    real_fields, real_text = real_length_figures(
        first,
        buckets[0],
        facts.view,
        threshold,
        rows_fix["batch_size"],
        phase,
        data,
        [t for t in targets if t["lengths"] == buckets[0]],
        bucketable,
        compiles,
        facts.costs,
    )
    fix = dataclasses.replace(fix, **real_fields)
    images = image_inputs(targets, sigs)
    if images:
        real_text = ""  # an image has no real length to count (its reason stays in the fix's real_lengths)
    counted = f", counted in elements over {axes_words(targets)} together" if len(targets) > 1 else ""
    advice = (
        f"{names[0].upper()}{names[1:]}. Fix: {rows} and pad {pad_targets}: "
        f"`xla_keras.data.apply_fix(data, fix)` on the data as you batched it "
        f"({compiles_words(compiles)} for the lengths seen so far, {overhead:.0%} more padding than those "
        f"batches{counted}; longer data doubles the last length), or switch XLA off for this model."
        f"{partial_text}{real_text}"
    )
    if batch_axes:
        advice += " The batch size varies too: use a fixed batch size."
    if images:
        changed, changed_text = changed_values(images, targets, facts.layers)
        exact, exact_text = by_size(phase, targets, facts.history, rows_fix["batch_size"], threshold, data)
        resized, resize_text = resize(images, targets, sigs, data)
        fix = dataclasses.replace(fix, padding_changes_values=changed, bucket_by_size=exact, resize=resized)
        advice += changed_text + exact_text + resize_text
    done = applied_fix(length_axes, facts.applied)
    if done is not None:
        advice = (
            f"These batches already have the lengths of a {done.kind} fix that xla_keras.data applied in this "
            f"process ({_taken(done, length_axes)}): their compiles are the ones it stated. {advice}"
        )
    return advice, fix


# What the session asks about storms and the compile budget: each phase's cause, advice and fix.


MAX_PAST_ADVICE = 16  # budget advice kept from earlier calls (one per phase, kind of call and fix)
NO_CALL_BASE = CallBase(0, 0.0, 0, 0, 0, 0, ({}, {}, 0))  # no call began: judged from the start


@dataclasses.dataclass(frozen=True)
class CallFacts:
    """What the advice knows of the running call beyond its shapes, handed in by the session: the data's
    kind (``storms.fixes.DATA_KINDS``: the fix's code), the model's layer classes (empty: not read), the
    fixes ``xla_keras.data`` applied in this process."""

    data: str = "tf.data"
    layers: Tuple[str, ...] = ()
    applied: Tuple[AppliedLengths, ...] = ()


class StormAnalysis:
    """A phase's varying inputs, advice and fix (``advice.analyse``), cached per phase until the phase
    sees a new signature, a new run or a new sample view: reports are built at every flush."""

    def __init__(self, config: MonitorConfig):
        self.config = config
        self._cache: Dict[str, tuple] = {}  # phase -> (key, analysis)
        self.past_advice: List[PhaseAdvice] = []  # the compile budget's advice on the calls before (bounded)

    def analyse(self, phase: str, stats: PhaseStats, facts: CallFacts) -> tuple:
        """(varying, advice, fix) from every shape the phase has seen so far; from the cause of the
        compiles at known signatures when they are most of the phase's (a value, JAX's context)."""
        if stats.last_known_cause is not None and 2 * stats.known_signature_compiles > stats.compile_count:
            return known_signature_analysis(stats)
        history, view = stats.history, stats.view
        key = (len(history.signatures), history.runs, facts, view.version if view else None)
        cached = self._cache.get(phase)
        if cached is None or cached[0] != key:  # analyse reads only these (and the costs of that moment)
            cached = self._cache[phase] = (key, self._analysed(phase, history, stats, facts))
        return cached[1]

    def _analysed(self, phase: str, history: ShapeHistory, stats: PhaseStats, facts: CallFacts) -> tuple:
        threshold = self.config.storm_threshold
        costs = phase_costs(stats)
        return analyse(phase, history, threshold, facts.data, stats.view, costs, facts.layers, facts.applied)

    def storm(
        self, phase: str, stats: PhaseStats, facts: CallFacts, step: int, count: int, window_start: int, action: str
    ) -> Storm:
        """A storm that opens now, with its cause and fix as far as the shapes tell yet."""
        varying, advice, fix = self.analyse(phase, stats, facts)
        return Storm(
            phase,
            step,
            count,
            varying,
            advice,
            fix,
            compiles=stats.compile_count,
            compile_seconds=stats.compile_seconds(),
            steady_step_seconds=stats.timing.median_seconds,
            window_start=window_start,
            action=action,
            cause=storm_cause_kind(stats),
        )

    def refreshed(self, storm: Storm, stats: PhaseStats, facts: CallFacts) -> Storm:
        """The storm with its cause and fix recomputed from every shape the phase has seen so far
        (more data than at the moment it opened); when its fix changed, ``fix_at_storm`` keeps the
        one the warning was computed with and the advice says what changed."""
        varying, advice, fix = self.analyse(storm.phase, stats, facts)
        if (fix.kind, fix_value(fix)) == (storm.fix.kind, fix_value(storm.fix)):
            return dataclasses.replace(storm, varying=varying, advice=advice, fix=fix)
        advice = f"{advice} {recomputed_words(storm.fix, fix)}"
        return dataclasses.replace(storm, varying=varying, advice=advice, fix=fix, fix_at_storm=storm.fix)

    def call_ended(
        self, phases: Dict[str, PhaseStats], storms: Sequence[Storm], facts: CallFacts, run: str, run_index: int
    ) -> None:
        """The running call is over (the next begins): its budget advice is kept as it stands; the
        same advice for the same kind of call (an evaluate in a loop) once, the latest."""
        for item in self.budget_advice(phases, storms, facts, run, run_index):
            same = (item.phase, item.run, item.fix)
            kept = [a for a in self.past_advice if (a.phase, a.run, a.fix) != same]
            self.past_advice = (kept + [item])[-MAX_PAST_ADVICE:]

    def advice(
        self, phases: Dict[str, PhaseStats], storms: Sequence[Storm], facts: CallFacts, run: str, run_index: int
    ) -> Tuple[PhaseAdvice, ...]:
        """The compile budget's advice: on the calls before, then on the running (or last) call."""
        return tuple(self.past_advice) + self.budget_advice(phases, storms, facts, run, run_index)

    def budget_advice(
        self, phases: Dict[str, PhaseStats], storms: Sequence[Storm], facts: CallFacts, run: str, run_index: int = 1
    ) -> Tuple[PhaseAdvice, ...]:
        """Phases of the running call (``run``: "fit", "evaluate" or "predict") whose recompiles in
        that call cost more than the compile budget, below the storm threshold: judged on the call
        alone, so two fits that batch differently on purpose are never merged."""
        out: List[PhaseAdvice] = []
        budget = self.config.compile_budget
        if budget is None:  # no budget: no such advice
            return ()
        for phase, stats in phases.items():
            base = stats.call_base or NO_CALL_BASE
            if any(s.phase == phase and s.step > base.step for s in storms):
                continue  # a storm of this call says it all
            # The step's own modules: a one-off program's (TensorFlow's variable initialiser) is no step compile.
            compiles = stats.compile_count - base.compiles - (stats.outside_compiles - base.outside_compiles)
            seconds = stats.compile_seconds() - base.compile_seconds - (stats.outside_seconds - base.outside_seconds)
            first, recompiles = first_signature_split(stats, base)
            over = over_budget(
                compiles,
                seconds,
                stats.steps_run - base.steps_run,
                stats.timing.median_seconds,
                budget,
                first,
                self.config.compile_budget_floor,
                recompiles,
            )
            if over is None:
                continue
            history = stats.history.since(base.history)
            varying, advice, fix = self._analysed(phase, history, stats, facts)
            if isinstance(fix, UnknownFix):
                continue  # nothing in the shapes explains the compiles: no fix to offer
            if already_fixed(history, fix, facts.applied):
                continue  # the batches already are what the fix makes (a fix applied): no padding again
            item = PhaseAdvice(
                phase, compiles, seconds, *over, budget, varying, advice, fix, run, run_index, recompiles=recompiles
            )
            item.advice = budget_text(phase, item)
            out.append(item)
        return tuple(out)


def first_signature_split(stats: PhaseStats, base: CallBase) -> Tuple[Optional[float], Optional[int]]:
    """(seconds of the call's first compile, the step's modules compiled past it) from the call's records.
    The first compile is every module of the call's first signature new to the step function (auto-clustering
    compiles one per cluster, some lazily at a later step): the price of XLA itself, never a recompile.
    Modules of a one-off program (``Compilation.outside_step``) are neither. Seconds are None when one of
    those modules was estimated from step time; both None when the call's records were capped."""
    if stats.records_dropped != base.records_dropped or len(stats.records) <= base.records:
        return None, None
    own = [r for r in stats.records[base.records :] if r.outside_step is None]
    if not own:
        return None, None
    signature = own[0].signature
    first = [r for r in own if r.signature == signature and r.cause not in KNOWN_SIGNATURE_CAUSES]
    seconds = sum(r.seconds for r in first) if all(r.source in MEASURED for r in first) else None
    return seconds, len(own) - len(first)


def phase_costs(stats: PhaseStats) -> Costs:
    """What the advice weighs a fix against: rows per run, what one more compile costs, the steady step."""
    rows = sum(
        (batch_rows(sig) or 0) * stats.history.batches.get(fp, 0) for fp, sig in stats.history.signatures.items()
    )
    per_run = rows // stats.history.runs if stats.history.runs else rows  # so far, in the first run
    return Costs(per_run or None, recompile_seconds(stats), stats.timing.median_seconds, bool(stats.history.runs))


def recompile_seconds(stats: PhaseStats) -> Optional[float]:
    """What one more compile of the phase costs: the median of its measured compiles after the first (the
    first also traces the step: 2-4x the others, measured), else the mean of them all."""
    later = [r.seconds for r in stats.records[1:] if r.source in MEASURED and r.outside_step is None]
    if len(later) >= 2:
        return statistics.median(later)
    return stats.compile_seconds() / stats.compile_count if stats.compile_count else None


def last_batch_remainder(phase: str, history: ShapeHistory, partial: Dict[int, Tuple[int, int]]) -> Optional[Remainder]:
    if not partial:
        return None
    rows, full = next(iter(partial.values()))
    total = sum((batch_rows(sig) or 0) * history.batches.get(fp, 0) for fp, sig in history.signatures.items())
    return Remainder(rows, full, total // history.runs if history.runs else None)


# Storms of compiles at known signatures: a value XLA takes as a constant, JAX's context or placement.

_KNOWN_FIXES = {
    "context": "keep JAX's configuration (and context managers around the fit) the same for the whole fit",
    "placement": (
        "feed every batch the same way: all numpy arrays, or all jax.Arrays placed with one sharding "
        "(jax.device_put with the same sharding), with the same dtypes (no Python scalars: weak types)"
    ),
    "retrace": "keep the step function's Python-side inputs the same, so that it is traced once per signature",
    "value": (
        "pad the ragged input to a dense tensor of a few lengths in the input pipeline, so its row splits "
        "take few values"
    ),
}


def storm_cause_kind(stats: PhaseStats) -> str:
    """What a storm of this phase is made of: "signature" (new input signatures), or the cause of the
    compiles at known signatures when they are most of the phase's (``core/types.py`` CAUSES)."""
    if stats.last_known_cause is not None and 2 * stats.known_signature_compiles > stats.compile_count:
        return stats.last_known_cause[0]
    return "signature"


def known_signature_analysis(stats: PhaseStats) -> Tuple[List[Dict[str, Any]], str, Fix]:
    """(varying, advice, fix) of a phase whose compiles are mostly at known signatures: nothing in the
    shapes varies; the cause is a value XLA takes as a constant (the fix: make it static, in the layer),
    JAX's tracing context, or the arrays' placement."""
    assert stats.last_known_cause is not None
    cause, why = stats.last_known_cause
    count = stats.known_signature_compiles
    if cause == "value" and stats.value_keys:
        key = stats.value_keys[0]
        fix: Fix = StaticValue(
            op=key.op,
            input=key.input,
            node=key.node,
            layer=key.layer,
            line=key.line,
            inputs=list(key.inputs),
            weights=list(key.weights),
            change=key.fix(),
        )
        advice = (
            f"{count} compiles at input signatures the step had compiled: {key.why()}. Fix: {key.fix()}; or "
            "switch XLA off for this model."
        )
        return [], advice, fix
    words = why or "the step compiled again at input signatures it had compiled"
    change = _KNOWN_FIXES.get(cause, "find what changes between the calls (print(monitor.report) lists them)")
    advice = f"{count} compiles at input signatures the step had compiled: {words}. Fix: {change}."
    return [], advice, UnknownFix()
