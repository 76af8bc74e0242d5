"""Real lengths: the padding the sampled batches really carry, and bucketing by real length as the other fix. Pure.

For padded inputs the figures come in two measures: against the batches as
they were fed (``padding_overhead``: what the advised lengths add) and against
the real tokens of a bounded sample of those batches (``real_padding_overhead``:
how much of the compute is zeros), with bucketing by real length computed by
the same exact optimiser as the other fix, so the advice can say which saves
more, and when bucketing's extra compiles are repaid.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from xla_keras.storms.buckets import TARGET_PADDING_OVERHEAD, best_buckets, pad_target
from xla_keras.storms.detection import VaryingAxis
from xla_keras.storms.fix_code import bucket_code, compiles_words
from xla_keras.storms.lengths import RealLengths, measure
from xla_keras.storms.remainder import REMAINDER, examples_words

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


def _pct(x: float) -> str:
    return f"{x:.0%}"


def _zeros(overhead: float) -> str:
    """An overhead (padded / real - 1) as the share of the computed tokens that are padding."""
    return f"{overhead / (1 + overhead):.0%} of the tokens computed are zeros"


def real_length_figures(
    axis: VaryingAxis,
    lengths: Sequence[int],
    view: Optional[SampleView],
    threshold: int,
    batch_size: Optional[int],
    phase: str,
    data: str,
    targets: Sequence[Dict[str, Any]],
    bucketable: bool,
    pad_compiles: int,
    costs: Optional[Costs] = None,
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
        rows_words = f"; the partial batch of each bucket is dropped: about {examples_words(round(epoch.dropped))} {of}"
    else:
        rows_words = (
            f"; each bucket's last batch is padded: about {round(epoch.padded_rows)} rows per run that "
            "unweighted metrics and the loss tracker count"
        )
    text += (
        f" Bucketing the examples by real length to {bounds} ({compiles_words(len(bounds))}{rows_words}) adds "
        f"{_pct(bucket_overhead)}."
    )
    if better == "bucket_by_length":
        extra = len(bounds) - pad_compiles
        zeros_pad, zeros_bucket = pad_per_row - real_per_row, bucket_per_row - real_per_row
        text += (
            f" Bucketing saves more compute: {ratio:.2f}x fewer tokens computed per example than padding the "
            f"batches ({saving:.0%} less"
            + (f"; the padding zeros fall {zeros_pad / zeros_bucket:.1f}x" if zeros_bucket > 0 else "")
            + (f"; for {compiles_words(extra)} more" if extra > 0 else "")
            + ")"
        )
        payback = payback_words(extra, costs, measured, pad_per_row, bucket_per_row, per_epoch)
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


def payback_words(
    extra: int,
    costs: Optional[Costs],
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
