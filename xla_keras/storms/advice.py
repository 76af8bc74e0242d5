"""Storm advice: the cause read off the shapes seen, the fix computed from them, and what it
saves, measured on real lengths where the batches allow it.

Pure (no TensorFlow). The fix is a dict that ``xla_keras.data.apply_fix`` applies
(``fix["code"]`` is the same call as one line). For padded inputs the figures
come in two measures: against the batches as they were fed (``padding_overhead``:
what the advised lengths add) and against the real tokens of a bounded sample of
those batches (``real_padding_overhead``: how much of the compute is zeros),
with bucketing by real length computed by the same exact optimiser as the other
fix, so the advice can say which saves more.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from xla_keras.core.signatures import InputSignature
from xla_keras.storms.buckets import TARGET_PADDING_OVERHEAD, _pad_to, best_buckets, pad_target
from xla_keras.storms.detection import (
    ShapeHistory,
    _Axis,
    batch_rows,
    partial_batch_signatures,
    structures_differ,
    varying_axes,
)
from xla_keras.storms.lengths import RealLengths, measure

DATA_KINDS = ("tf.data", "arrays")  # arrays: numpy / generators / PyDataset (no TensorFlow in the fix)
# Training drops a partial last batch (one fewer compile, a few examples unseen per epoch);
# validation and predict keep every example: the last batch's rows are padded and weigh nothing.
REMAINDER = {"train": "drop", "test": "pad", "predict": "pad"}
# Bucketing by real length is called the better fix when it cuts at least this share of the
# padded tokens that padding the batches leaves (below it, the simpler fix is as good).
BETTER_BY = 0.05


@dataclass(frozen=True)
class SampleView:
    """The sampled batches at one moment (a storm opened, a fit ended): what real lengths are
    measured on. ``kept`` is a copy of the reservoir's list, never changed afterwards."""

    kept: Tuple[Dict[str, Any], ...] = ()
    seen: int = 0
    version: int = 0
    unsampled: Optional[str] = None  # why nothing was sampled

    def measure(self, candidates: Sequence[Tuple[str, int]]) -> Optional[RealLengths]:
        return measure(self, candidates)  # a view has the sample's kept batches and count


def choose_buckets(
    axes: List[_Axis], signatures: Sequence[Tuple[InputSignature, int]], max_compiles: int
) -> Tuple[List[List[int]], float, int]:
    """Bucket each varying axis so the joint number of padded signatures stays
    below ``max_compiles``: start with one bucket each and add buckets where
    they save the most padding while padding is above the target."""
    ks = [1] * len(axes)
    buckets = [best_buckets(a.values, 1)[0] for a in axes]

    def joint(bk):
        combos = set()
        index = {(a.path, a.axis): i for i, a in enumerate(axes)}
        for sig, _ in signatures:
            combo = []
            for leaf in sig:
                for axis, size in enumerate(leaf.shape):
                    i = index.get((leaf.path, axis))
                    if i is not None and size is not None:
                        combo.append(_pad_to(size, bk[i]))
            combos.add(tuple(combo))
        return max(1, len(combos))

    def overhead(bk):
        real = padded = 0
        for a, b in zip(axes, bk):
            real += sum(v * w for v, w in a.values.items() if v is not None)
            padded += sum(_pad_to(v, b) * w for v, w in a.values.items() if v is not None)
        return padded / real - 1 if real else 0.0

    while overhead(buckets) > TARGET_PADDING_OVERHEAD:
        options = []
        for i, a in enumerate(axes):
            trial = list(buckets)
            trial[i] = best_buckets(a.values, ks[i] + 1)[0]
            if len(trial[i]) == len(buckets[i]):
                continue  # no more distinct lengths to split on
            if joint(trial) < max_compiles:
                options.append((overhead(trial), i, trial))
        if not options:
            break
        _, i, buckets = min(options)
        ks[i] += 1
    return buckets, overhead(buckets), joint(buckets)


# ------------------------------------------------------------------ the fix's code


def _call(function: str, fix: Dict[str, Any], data: str, extra: str = "") -> str:
    """The one line that applies ``fix`` with ``xla_keras.data``, with the fix written out so the
    line stands alone (no ``storm`` object needed)."""
    minimal = {
        k: fix[k]
        for k in ("kind", "targets", "length_of", "lengths", "size", "rows", "batch_size", "remainder")
        if k in fix
    }
    if fix.get("kind") != "bucket_by_length":
        minimal.pop("lengths", None)  # the targets carry them
    name = "ds" if data == "tf.data" else "batches"
    source = "examples" if function == "bucket_by_length" else name
    return f"import xla_keras\n{name} = xla_keras.data.{function}({source}, {minimal!r}{extra})"


def apply_code(fix: Dict[str, Any], data: str) -> str:
    where = (
        "  # on the dataset as you batched it"
        if data == "tf.data"
        else "  # numpy / generator batches -> a keras.utils.PyDataset"
    )
    return _call("apply_fix", fix, data) + where


def bucket_code(fix: Dict[str, Any], data: str) -> str:
    where = (
        "  # on the dataset of single examples, before batching"
        if data == "tf.data"
        else "  # an iterable of single examples -> a keras.utils.PyDataset"
    )
    return _call("bucket_by_length", fix, data) + where


def _compiles(n: int) -> str:
    return f"{n} compile" + ("" if n == 1 else "s")


def _examples(n: int) -> str:
    return f"{n} example" + ("" if n == 1 else "s")


# ------------------------------------------------------------------ remainders


@dataclass
class Remainder:
    """The partial last batch of each epoch (run), and what the fix does with it."""

    rows: int
    batch_size: int
    rows_per_run: Optional[int]  # rows of a whole epoch / run, when runs ended

    def text(self, phase: str) -> str:
        pad = self.batch_size - self.rows
        if REMAINDER[phase] == "drop":
            return (
                f" The last batch of each epoch also has {self.rows} rows instead of {self.batch_size} (one "
                f"extra compile): the fix drops it, so {_examples(self.rows)} per epoch are not trained on "
                "(a different one each epoch when the data is shuffled)."
            )
        share = f" ({pad / (self.rows_per_run + pad):.1%} of a run's rows)" if self.rows_per_run else ""
        if phase != "test":
            return (
                f" The last batch of each run also has {self.rows} rows instead of {self.batch_size} (one "
                f"extra compile): the fix pads it to {self.batch_size} rows with copies of its last row, so "
                f"predict returns {pad} extra rows at the end: keep the first {self.rows_per_run or 'n'} "
                "(drop_remainder=True would lose predictions)."
            )
        return (
            f" The last batch of each run also has {self.rows} rows instead of {self.batch_size} (one extra "
            f"compile): the fix pads it to {self.batch_size} rows (copies of its last row) that weigh nothing "
            "(sample_weight 0), keeping every example (metrics passed as compile(weighted_metrics=...) stay "
            f"exact; unweighted metrics and Keras's loss tracker count the {pad} padded rows{share}); "
            "drop_remainder=True would drop examples from the results."
        )


def _remainder(phase: str, history: ShapeHistory, partial: Dict[int, Tuple[int, int]]) -> Optional[Remainder]:
    if not partial:
        return None
    rows, full = next(iter(partial.values()))
    total = sum((batch_rows(sig) or 0) * history.batches.get(fp, 0) for fp, sig in history.signatures.items())
    return Remainder(rows, full, total // history.runs if history.runs else None)


# ------------------------------------------------------------------ real lengths


def _pct(x: float) -> str:
    return f"{x:.0%}"


def _zeros(overhead: float) -> str:
    """An overhead (padded / real - 1) as the share of the computed tokens that are padding."""
    return f"{overhead / (1 + overhead):.0%} of the tokens computed are zeros"


def real_length_figures(
    axis: _Axis,
    lengths: Sequence[int],
    view: Optional[SampleView],
    threshold: int,
    batch_size: Optional[int],
    phase: str,
    data: str,
    targets: Sequence[Dict[str, Any]],
    bucketable: bool,
    pad_compiles: int,
    costs: Optional["Costs"] = None,
) -> Tuple[Dict[str, Any], str]:
    """Fix fields and advice text from the real lengths of ``axis`` (or an input that varies with it):
    the padding of the batches as fed and after the pad fix, against real tokens, and the bucketing
    alternative computed on the real length distribution."""
    if view is None:
        return {}, ""
    candidates = [(axis.path, axis.axis)] + [(o.rsplit(":", 1)[0], int(o.rsplit(":", 1)[1])) for o in axis.also]
    try:
        measured = view.measure(candidates) if not view.unsampled else None
        failed = None
    except Exception as error:  # noqa: BLE001 - a figure of the advice, never a reason to fail the report
        measured, failed = None, f"reading the sampled batches failed ({type(error).__name__}: {error})"
    if measured is None or measured.real_tokens() <= 0:
        reason = (
            failed
            or view.unsampled
            or (
                "no integer or mask input varies with it (real lengths are counted as the nonzero positions of "
                "token ids or a mask)"
            )
        )
        return ({"real_lengths": {"measured": False, "reason": reason}}, f" Real lengths not measured: {reason}.")
    real = measured.real_tokens()
    fed_overhead = measured.fed_tokens() / real - 1
    pad_tokens = measured.padded_tokens(lambda fed: pad_target(fed, lengths))
    pad_overhead = pad_tokens / real - 1
    rows = measured.rows()
    histogram = measured.histogram()
    sample_words = (
        f"all {measured.sampled} batches"
        if measured.sampled >= measured.seen
        else f"a sample of {measured.sampled} of {measured.seen} batches"
    )
    fields: Dict[str, Any] = {
        "real_lengths": {
            "measured": True,
            "path": measured.path,
            "axis": measured.axis,
            "sampled_batches": measured.sampled,
            "batches_seen": measured.seen,
            "rows": rows,
            "real_tokens": real,
            "mean": round(real / rows, 2) if rows else None,
            "max": max(histogram) if histogram else None,
        },
        "batches_real_padding_overhead": round(fed_overhead, 4),
        "real_padding_overhead": round(pad_overhead, 4),
    }
    text = (
        f" Against the real tokens of '{measured.path}' ({sample_words}; mean real length {real / rows:.1f}), "
        f"padding adds {_pct(fed_overhead)} to the batches as fed ({_zeros(fed_overhead)}) and "
        f"{_pct(pad_overhead)} once padded to {list(lengths)} ({_zeros(pad_overhead)})."
    )
    if not bucketable:
        if phase == "predict":
            text += " (Bucketing by length is not offered for predict: it would reorder the outputs.)"
        return fields, text
    k, bounds, overhead = 1, *best_buckets(histogram, 1)
    while overhead > TARGET_PADDING_OVERHEAD and k + 1 < threshold:
        more, more_overhead = best_buckets(histogram, k + 1)
        if len(more) == len(bounds):
            break
        k, bounds, overhead = k + 1, more, more_overhead
    per_epoch = (
        costs.rows_per_run
        if costs and costs.rows_per_run
        else rows * max(1.0, measured.seen / max(1, measured.sampled))
    )
    remainder = REMAINDER[phase]
    epoch = bucket_epoch(histogram, bounds, per_epoch, batch_size, remainder)
    bounds = epoch.bounds
    real_per_row = real / rows
    pad_per_row = measured.padded_tokens(lambda fed: pad_target(fed, lengths)) / rows
    # Per example computed (dropped examples cost nothing, padded rows do): the compute comparison.
    bucket_per_row = epoch.tokens / epoch.kept if epoch.kept else float("inf")
    bucket_overhead = measured.bucketed_tokens(lambda v: pad_target(v, bounds)) / real - 1
    bucket = {
        "kind": "bucket_by_length",
        "length_of": {"path": measured.path, "axis": measured.axis, "rank": measured.rank},
        "lengths": bounds,
        "targets": [{"path": t["path"], "axis": t["axis"]} for t in targets],
        "batch_size": batch_size,
        "remainder": remainder,
        "compiles": len(bounds),
        "real_padding_overhead": round(bucket_overhead, 4),
        "examples_per_epoch": round(per_epoch),
    }
    if remainder == "drop":
        bucket["dropped_per_epoch"] = round(epoch.dropped)
    else:
        bucket["padded_rows_per_epoch"] = round(epoch.padded_rows)
    bucket["code"] = bucket_code(bucket, data)
    ratio = pad_per_row / bucket_per_row if bucket_per_row else 0.0
    saving = 1 - 1 / ratio if ratio else 0.0
    better = "bucket_by_length" if saving >= BETTER_BY else "pad_to_lengths"
    fields.update({"bucket_by_length": bucket, "compute_ratio": round(ratio, 4), "better_fix": better})
    if remainder == "drop":
        of = (
            f"of {round(per_epoch)} per epoch"
            if not costs or costs.whole_run
            else f"of the {round(per_epoch)} seen so far"
        )
        rows_words = f"; the partial batch of each bucket is dropped: about {_examples(round(epoch.dropped))} {of}"
    else:
        rows_words = (
            f"; each bucket's last batch is padded: about {round(epoch.padded_rows)} rows per run that "
            "unweighted metrics and the loss tracker count"
        )
    text += (
        f" Bucketing the examples by real length to {bounds} ({_compiles(len(bounds))}{rows_words}) adds "
        f"{_pct(bucket_overhead)}."
    )
    if better == "bucket_by_length":
        extra = len(bounds) - pad_compiles
        zeros_pad, zeros_bucket = pad_per_row - real_per_row, bucket_per_row - real_per_row
        text += (
            f" Bucketing saves more compute: {ratio:.2f}x fewer tokens computed per example than padding the "
            f"batches ({saving:.0%} less"
            + (f"; the padding zeros fall {zeros_pad / zeros_bucket:.1f}x" if zeros_bucket > 0 else "")
            + (f"; for {_compiles(extra)} more" if extra > 0 else "")
            + ")"
        )
        payback = _payback(extra, costs, measured, pad_per_row, bucket_per_row, per_epoch)
        text += payback + ": `xla_keras.data.bucket_by_length(examples, fix)` on the examples before batching."
    else:
        text += f" Padding the batches is as good (bucketing would save {saving:.0%} of the tokens computed)."
    return fields, text


class Costs(NamedTuple):
    """What a phase's compiles and steps cost, for the advice's trade-offs."""

    rows_per_run: Optional[int]  # examples per epoch (or evaluate / predict run)
    mean_compile_seconds: Optional[float]
    steady_step_seconds: Optional[float]
    whole_run: bool = True  # False: no run has ended yet, rows_per_run is what was seen so far


class BucketEpoch(NamedTuple):
    bounds: List[int]
    tokens: float  # tokens computed per epoch
    kept: float  # examples computed per epoch (dropped ones excluded)
    dropped: float
    padded_rows: float


def bucket_epoch(
    histogram: Dict[int, int], bounds: Sequence[int], per_epoch: float, batch_size: Optional[int], remainder: str
) -> BucketEpoch:
    """One epoch of bucketing by length, expected from the sampled length distribution. With
    ``remainder="drop"`` a bucket that fills no batch would never be trained on: its boundary is
    removed (its examples go up to the next bucket; a sparse last bucket absorbs the one below)."""
    total = sum(histogram.values())
    bounds = list(bounds)
    b = batch_size or 1

    def counts(bs):
        n = [0.0] * len(bs)
        for v, c in histogram.items():
            n[next((i for i, x in enumerate(bs) if v <= x), len(bs) - 1)] += c * per_epoch / total
        return n

    n = counts(bounds)
    while remainder == "drop" and len(bounds) > 1 and min(n) < b:
        i = min(range(len(n)), key=lambda j: n[j])
        del bounds[i if i < len(bounds) - 1 else i - 1]
        n = counts(bounds)
    tokens = kept = dropped = padded = 0.0
    for x, m in zip(bounds, n):
        full = (m // b) * b if remainder == "drop" else -(-m // b) * b
        tokens += full * x
        kept += min(full, m)
        dropped += max(0.0, m - full)
        padded += max(0.0, full - m)
    return BucketEpoch(bounds, tokens, kept, dropped, padded)


def _payback(
    extra: int,
    costs: Optional["Costs"],
    measured: RealLengths,
    pad_per_row: float,
    bucket_per_row: float,
    per_epoch: float,
) -> str:
    """When bucketing's extra compiles are repaid, if step time follows the tokens computed."""
    if extra <= 0 or not costs or not costs.mean_compile_seconds or not costs.steady_step_seconds:
        return ""
    fed_per_row = measured.fed_tokens() / measured.rows()
    seconds_per_token = costs.steady_step_seconds / (fed_per_row * measured.rows() / measured.sampled)
    saved_per_epoch = seconds_per_token * (pad_per_row - bucket_per_row) * per_epoch
    if saved_per_epoch <= 0:
        return ""
    cost = extra * costs.mean_compile_seconds
    epochs = cost / saved_per_epoch
    when = f"{epochs:.1f}" if epochs < 10 else f"{epochs:.0f}"
    return (
        f"; if step time follows the tokens, its {extra} extra compiles (~{cost:.1f} s) are repaid after ~{when} epochs"
    )


# ------------------------------------------------------------------ analysis


def analyse(
    phase: str,
    history: ShapeHistory,
    threshold: int,
    data: str = "tf.data",
    view: Optional[SampleView] = None,
    costs: Optional[Costs] = None,
) -> Tuple[List[Dict[str, Any]], str, Dict[str, Any]]:
    """Cause, advice and fix from everything the phase has seen. ``data``: "tf.data", or
    "arrays" (numpy, generators, PyDataset under Keras's JAX backend): the fix's code then
    needs no TensorFlow. ``view``: sampled batches to measure real lengths on.

    Returns (varying, advice text without the header line, fix)."""
    partial = partial_batch_signatures(history)
    remainder = _remainder(phase, history, partial)
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
        return varying, *_pad_advice(
            phase, length_axes, batch_axes, sigs, threshold, data, view, rows_fix, partial_text, costs
        )
    if batch_axes:
        a = batch_axes[0]
        d = a.describe()
        size = max(a.values, key=lambda v: (a.values[v], v))
        fix = {
            "kind": "fixed_batch_size",
            "path": a.path,
            "size": size,
            "batch_size": size,
            "remainder": REMAINDER[phase],
            "drop_remainder": REMAINDER[phase] == "drop",
        }
        fix["code"] = apply_code(fix, data)
        rest = (
            "drops the last partial batch"
            if REMAINDER[phase] == "drop"
            else "pads the last batch's rows, which weigh nothing"
        )
        arrays = f" (arrays: `model.fit(x, y, batch_size={size})`)" if data == "arrays" else ""
        advice = (
            f"The batch size varies (input '{a.path}' axis 0: {d['min']}..{d['max']}, "
            f"{d['n_values']} values). Fix: batch to a fixed size of {size}: "
            f"`xla_keras.data.apply_fix(data, fix)` re-batches and {rest} (1 compile){arrays}, or "
            "switch XLA off for this model."
        )
        return varying, advice, fix
    if structures_differ(sigs):
        fix = {"kind": "consistent_structure"}
        advice = (
            "The inputs change structure or dtype between batches (leaves appear, vanish or change "
            "dtype or rank): each variant compiles. Fix: feed every batch with the same structure "
            "and dtypes (cast in the input pipeline)."
        )
        return varying, advice, fix
    if remainder:
        kind = "drop_remainder" if REMAINDER[phase] == "drop" else "pad_remainder"
        fix = {"kind": kind, "rows": remainder.rows, "batch_size": remainder.batch_size, "remainder": REMAINDER[phase]}
        fix["code"] = apply_code(fix, data)
        return varying, partial_text.strip(), fix
    return varying, "New signatures kept arriving but no single input explains them.", {"kind": "unknown"}


def _pad_advice(
    phase: str,
    length_axes: List[_Axis],
    batch_axes: List[_Axis],
    sigs: Sequence[Tuple[InputSignature, int]],
    threshold: int,
    data: str,
    view: Optional[SampleView],
    rows_fix: Dict[str, Any],
    partial_text: str,
    costs: Optional[Costs] = None,
):
    buckets, overhead, compiles = choose_buckets(length_axes, sigs, threshold)
    first = length_axes[0]
    targets = []
    for a, b in zip(length_axes, buckets):
        targets.append({"path": a.path, "axis": a.axis, "lengths": b})
        for other in a.also:  # co-varying leaves (e.g. a mask) get the same lengths
            other_path, other_axis = other.rsplit(":", 1)
            if "@" not in other_path:
                targets.append({"path": other_path, "axis": int(other_axis), "lengths": b})
    fix: Dict[str, Any] = {
        "kind": "pad_to_lengths",
        "path": first.path,
        "axis": first.axis,
        "lengths": buckets[0],
        "targets": targets,
        **rows_fix,
        "drop_remainder": rows_fix["remainder"] == "drop",
        "padding_overhead": round(overhead, 4),
        "compiles": compiles,
    }
    if len(length_axes) > 1:
        fix["per_input"] = [{"path": a.path, "axis": a.axis, "lengths": b} for a, b in zip(length_axes, buckets)]
    fix["code"] = apply_code(fix, data)

    def together(a: _Axis) -> str:  # co-varying leaves, kept as "path:axis" in the fix's varying list
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
        view,
        threshold,
        rows_fix["batch_size"],
        phase,
        data,
        [t for t in targets if t["lengths"] == buckets[0]],
        bucketable,
        compiles,
        costs,
    )
    fix.update(real_fields)
    advice = (
        f"{names[0].upper()}{names[1:]}. Fix: {rows} and pad {pad_targets}: "
        f"`xla_keras.data.apply_fix(data, fix)` on the data as you batched it "
        f"({_compiles(compiles)} for the lengths seen so far, {overhead:.0%} more padding than those batches; "
        f"longer data doubles the last length), or switch XLA off for this model.{partial_text}{real_text}"
    )
    if batch_axes:
        advice += " The batch size varies too: use a fixed batch size."
    return advice, fix


# ------------------------------------------------------------------ compile budget


@dataclass
class PhaseAdvice:
    """Advice for a phase below the storm threshold whose recompiles cost more than the compile
    budget's share of its time (``XlaMonitor(compile_budget=...)``). Advice only: it never stops or
    switches anything.

    Attributes:
        phase: "train", "test" or "predict".
        compiles: the phase's compiles; compile_seconds: their time.
        recompile_seconds: the time of the compiles beyond one (what stable shapes would save).
        wall_seconds: compile seconds plus steps at the steady step time.
        share: recompile_seconds / wall_seconds; budget: the share allowed.
        varying, advice, fix: as in a Storm (``fix`` applies with ``xla_keras.data.apply_fix``).
    """

    phase: str
    compiles: int
    compile_seconds: float
    recompile_seconds: float
    wall_seconds: float
    share: float
    budget: float
    varying: List[Dict[str, Any]] = field(default_factory=list)
    advice: str = ""
    fix: Dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "phase": self.phase,
            "compiles": self.compiles,
            "compile_seconds": self.compile_seconds,
            "recompile_seconds": self.recompile_seconds,
            "wall_seconds": self.wall_seconds,
            "share": self.share,
            "budget": self.budget,
            "varying": self.varying,
            "advice": self.advice,
            "fix": self.fix,
        }

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "PhaseAdvice":
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


def over_budget(
    compiles: int,
    compile_seconds: float,
    steps: int,
    steady_seconds: Optional[float],
    budget: Optional[float],
    first_compile_seconds: Optional[float] = None,
) -> Optional[Tuple[float, float, float]]:
    """(recompile seconds, wall seconds, share) when a phase's compiles beyond its first cost more
    than ``budget`` of its time, else None (``first_compile_seconds``: measured, when recorded).
    The first compile is the price of XLA itself; the others are what stable shapes would save.
    Wall time = compiles + steps at the steady step time
    (the same on both backends, where a JAX step's own end is not observable)."""
    if budget is None or compiles < 2 or compile_seconds <= 0:
        return None
    recompile = (
        compile_seconds - first_compile_seconds
        if first_compile_seconds is not None
        else compile_seconds * (compiles - 1) / compiles
    )  # the mean, when the first is not recorded
    wall = compile_seconds + steps * (steady_seconds or 0.0)
    share = recompile / wall
    return (recompile, wall, share) if share > budget else None


def budget_text(phase: str, item: PhaseAdvice) -> str:
    words = {"train": "training", "test": "validation / evaluate", "predict": "predict"}[phase]
    return (
        f"Compile budget ({phase}): {words} compiled {item.compiles} times, {item.recompile_seconds:.2f} s "
        f"beyond the first compile = {item.share:.0%} of its {item.wall_seconds:.2f} s (budget "
        f"{item.budget:.0%}; below the storm threshold, so no storm; judged on this fit's time: compiles are "
        f"paid once, padding every epoch). {item.advice}"
    )
