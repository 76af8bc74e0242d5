"""Recompilation storms: detection over a window, the shapes a phase has seen, and their causes.

Pure (no TensorFlow). A storm is ``threshold`` signatures new to the running
function within ``window`` steps of one phase: each one is an XLA compile of
hundreds of ms against ~1 ms steady steps. The cause is read off the shapes
actually seen (``varying_axes``, partial last batches); the advice and the fix
computed from them live in ``session/storm_analysis.py``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from xla_keras.core.messages import WIDTH, shaped, within
from xla_keras.core.plain_data import known_fields, record_dict
from xla_keras.core.signatures import InputSignature, diff, fingerprint
from xla_keras.storms.fixes import Fix, UnknownFix, cause_clause, fix_from_dict, fix_line, so_far, values_words

# XlaMonitor's storm_threshold and storm_window by default (MonitorConfig's fields; validated there).
STORM_THRESHOLD = 8
STORM_WINDOW = 200


@dataclass(frozen=True)
class StormRule:
    """The monitor's storm rule: ``threshold`` new shapes compiled within ``window`` steps."""

    threshold: int = STORM_THRESHOLD
    window: int = STORM_WINDOW


ON_STORM = ("warn", "raise", "fallback")
# Beyond this many distinct signatures per phase the history keeps counting
# batches of known signatures but stores no new ones: memory stays bounded.
MAX_TRACKED_SIGNATURES = 4096
MAX_VALUES_LISTED = 64


@dataclass
class Storm:
    """A burst of new input signatures in one phase, and what to do about it.

    The monitor opens one when ``storm_threshold`` signatures new to a phase's step function fall
    within ``storm_window`` steps (``report.storms``); each is one warning, or the
    ``RecompilationStormError`` of ``on_storm="raise"``.

    Args:
        phase: "train", "test" or "predict".
        step: the step at which the storm opened (the threshold-th new signature).
        count: new signatures within the window at that step.
        varying: ``[{"path", "axis", "min", "max", "n_values", "values"}]``.
        advice: the human text.
        fix: machine-readable fix (its ``kind`` is one of ``xla_keras.storms.fixes.KINDS``);
            ``xla_keras.data.apply_fix`` applies the kinds in ``xla_keras.data.APPLIED_KINDS``.
        compiles: compiles of the phase so far.
        compile_seconds: their time.
        steady_step_seconds: the phase's steady median when it opened.
        window_start: the step of the first new signature in the window.
        action: what the monitor did: "warn", "raise" or "fallback".
        fix_at_storm: the fix as computed when the storm opened, when it differs from ``fix``
            (recomputed from every shape seen by the end of the call; ``advice`` says what
            changed); None when the two agree.
        cause: what the storm is made of (``xla_keras.core.types.CAUSES``): "signature" (new input
            signatures), or the cause of compiles at known signatures when they are most of the phase's
            ("value": an input XLA takes as a compile-time constant; JAX's "context" or "placement"); None in
            a report older than schema 13 (new signatures).

    Example:
        `model`, `x`, `y`: any compiled Keras model and its data; a batch size that changes at every
        step is a storm (here at 3 new shapes; the monitor warns).

        ```pycon
        >>> def batches():
        ...     for n in (8, 16, 24):
        ...         yield x[:n], y[:n]
        >>> monitor = xla_keras.XlaMonitor(log_dir=None, jit="on", storm_threshold=3, verbose=0)
        >>> history = model.fit(batches(), verbose=0, callbacks=[monitor])
        >>> storm = monitor.report.storms[0]
        >>> storm.phase, storm.step, storm.count, storm.action
        ('train', 3, 3, 'warn')
        >>> storm.fix["kind"], storm.fix["size"]
        ('fixed_batch_size', 24)
        >>> fixed = xla_keras.data.apply_fix(list(batches()), storm.fix)
        >>> [batch[0].shape for batch in fixed]  # one shape: one compile
        [(24, 4), (24, 4)]

        ```
    """

    phase: str
    step: int
    count: int
    varying: List[Dict[str, Any]] = field(default_factory=list)
    advice: str = ""
    fix: Fix = field(default_factory=UnknownFix)
    compiles: int = 0
    compile_seconds: float = 0.0
    steady_step_seconds: Optional[float] = None
    window_start: int = 0
    action: str = "warn"
    fix_at_storm: Optional[Fix] = None
    cause: Optional[str] = None

    def __post_init__(self) -> None:
        self.fix = fix_from_dict(self.fix)  # a fix passed as a dict (its JSON form) is read as its kind's record
        if self.fix_at_storm is not None:
            self.fix_at_storm = fix_from_dict(self.fix_at_storm)

    def to_dict(self) -> Dict[str, Any]:
        """This storm as the report's JSON holds it.

        Returns:
            A dict of the fields.
        """
        return record_dict(self)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Storm":
        """A storm read back from ``to_dict()``'s form (unknown keys are ignored).

        Args:
            d: a dict as ``to_dict()`` writes it.

        Returns:
            A ``Storm``.
        """
        return cls(**known_fields(cls, d))  # the fixes: read by __post_init__


class StormDetector:
    """Opens a storm when a phase's window holds ``threshold`` new signatures.

    One storm at a time per phase: the next can open only after the count in
    the window has fallen back below the threshold. Memory: ``threshold``
    step numbers per phase.
    """

    def __init__(self, rule: StormRule):
        self.threshold = rule.threshold  # validated by MonitorConfig
        self.window = rule.window
        self._recent: Dict[str, deque] = {}
        self._open: Dict[str, bool] = {}

    def new_signature(self, phase: str, step: int) -> Optional[Tuple[int, int]]:
        """Record a new signature at ``step``. Returns ``(count, window_start)``
        when this one opens a storm, else None."""
        recent = self._recent.setdefault(phase, deque(maxlen=self.threshold))
        recent.append(step)
        first = step - self.window + 1
        count = sum(1 for s in recent if s >= first)
        if count < self.threshold:
            self._open[phase] = False
            return None
        if self._open.get(phase):
            return None
        self._open[phase] = True
        return count, recent[0]


# ------------------------------------------------------------------ history


class ShapeHistory:
    """The signatures a phase has seen, with batch counts and epoch ends."""

    def __init__(self, max_signatures: int = MAX_TRACKED_SIGNATURES):
        self.max_signatures = max_signatures
        self.signatures: Dict[int, InputSignature] = {}
        self.batches: Dict[int, int] = {}
        self.ends: Dict[int, int] = {}  # times a signature was the last batch of an epoch
        self.runs = 0  # epochs (train) or evaluate/predict runs ended
        self.last: Optional[int] = None
        self.untracked = 0

    def observe(self, signature: InputSignature) -> None:
        fp = fingerprint(signature)
        count = self.batches.get(fp)
        if count is None:
            if len(self.signatures) >= self.max_signatures:
                self.untracked += 1
                self.last = None
                return
            self.signatures[fp] = signature
            count = 0
        self.batches[fp] = count + 1
        self.last = fp

    def observe_repeat(self, signature: InputSignature) -> None:
        """``observe`` for a batch of the same signature as the last one observed."""
        if self.last is not None:
            self.batches[self.last] += 1
        else:
            self.observe(signature)

    def end_of_run(self) -> None:
        """The last batch observed closed an epoch (or an evaluate/predict run)."""
        self.runs += 1
        if self.last is not None:
            self.ends[self.last] = self.ends.get(self.last, 0) + 1

    def mark(self) -> Tuple[Dict[int, int], Dict[int, int], int]:
        """Where the history stands now (batch counts, epoch ends, runs), for ``since``."""
        return dict(self.batches), dict(self.ends), self.runs

    def since(self, mark: Tuple[Dict[int, int], Dict[int, int], int]) -> "ShapeHistory":
        """The signatures seen since ``mark`` (one call's), as a history of their own."""
        batches, ends, runs = mark
        view = ShapeHistory(self.max_signatures)
        for fp, n in self.batches.items():
            if n > batches.get(fp, 0):
                view.signatures[fp], view.batches[fp] = self.signatures[fp], n - batches.get(fp, 0)
        view.ends = {fp: n - ends.get(fp, 0) for fp, n in self.ends.items() if n > ends.get(fp, 0)}
        view.runs = self.runs - runs
        return view


def _structure(sig: InputSignature) -> tuple:
    return tuple((leaf.path, leaf.dtype, len(leaf.shape)) for leaf in sig)


def partial_batch_signatures(history: ShapeHistory) -> Dict[int, Tuple[int, int]]:
    """Signatures that only ever came as the last batch of an epoch (or run)
    with fewer rows than the usual batch size: ``{fp: (rows, batch_size)}``.
    Their other axes may differ too (a padded last batch)."""
    if len(history.signatures) < 2 or not history.ends:
        return {}
    rows_weight: Dict[int, int] = {}
    for fp, sig in history.signatures.items():
        rows = batch_rows(sig)
        if rows is not None:
            rows_weight[rows] = rows_weight.get(rows, 0) + history.batches.get(fp, 0)
    if not rows_weight:
        return {}
    batch_size = max(rows_weight, key=lambda r: (rows_weight[r], r))
    found = {}
    for fp, ends in history.ends.items():
        last = history.signatures.get(fp)
        if last is None or ends != history.batches.get(fp):
            continue
        rows = batch_rows(last)
        if rows is not None and rows < batch_size:
            found[fp] = (rows, batch_size)
    return found


def batch_rows(sig: InputSignature) -> Optional[int]:
    """Rows of a batch: axis 0, when every leaf agrees on it."""
    rows = {leaf.shape[0] for leaf in sig if leaf.shape}
    return rows.pop() if len(rows) == 1 else None


# ------------------------------------------------------------------ causes


@dataclass
class VaryingAxis:
    path: str
    axis: int
    values: Dict[Optional[int], int]  # value -> batches
    also: List[str] = field(default_factory=list)  # co-varying "path:axis"

    @property
    def known_values(self) -> Dict[int, int]:
        """``values`` without the unknown size (None)."""
        return {v: n for v, n in self.values.items() if v is not None}

    def describe(self) -> Dict[str, Any]:
        vals = sorted(v for v in self.values if v is not None)
        out = {
            "path": self.path,
            "axis": self.axis,
            "min": vals[0] if vals else None,
            "max": vals[-1] if vals else None,
            "n_values": len(vals),
            "values": vals[:MAX_VALUES_LISTED],
        }
        if self.also:
            out["also"] = list(self.also)
        return out


def varying_axes(signatures: Sequence[Tuple[InputSignature, int]]) -> List[VaryingAxis]:
    """(path, axis) whose size differs between signatures of the dominant
    structure, co-varying axes merged (e.g. tokens and mask lengths)."""
    if not signatures:
        return []
    by_structure: Dict[tuple, List[Tuple[InputSignature, int]]] = {}
    for sig, n in signatures:
        by_structure.setdefault(_structure(sig), []).append((sig, n))
    group = max(by_structure.values(), key=lambda g: sum(n for _, n in g))
    columns: Dict[Tuple[str, int], List[Optional[int]]] = {}
    weights = [n for _, n in group]
    for sig, _ in group:
        for leaf in sig:
            for axis, size in enumerate(leaf.shape):
                columns.setdefault((leaf.path, axis), []).append(size)
    merged: Dict[tuple, VaryingAxis] = {}
    for (path, axis), column in columns.items():
        if len(set(column)) < 2:
            continue
        key = tuple(column)
        if key in merged:
            merged[key].also.append(f"{path}:{axis}")
            continue
        values: Dict[Optional[int], int] = {}
        for size, w in zip(column, weights):
            values[size] = values.get(size, 0) + w
        merged[key] = VaryingAxis(path, axis, values)
    return list(merged.values())


def structures_differ(signatures: Sequence[Tuple[InputSignature, int]]) -> bool:
    return len({_structure(sig) for sig, _ in signatures}) > 1


def _fmt_ms(seconds: Optional[float]) -> str:
    if seconds is None:
        return "n/a"
    if seconds >= 1:
        return f"{seconds:.1f} s"
    ms = seconds * 1e3
    return f"{ms:.0f} ms" if ms >= 10 else f"{ms:.2g} ms"


def storm_text(storm: Storm, index: int, log_dir: Optional[str] = None, data: str = "tf.data", then: str = "") -> str:
    """The storm's console message (also the RecompilationStormError message): what happened, the
    cause, the fix as one line of code, and where the full advice is (``storm.advice``), in at most
    4 lines of at most 100 characters. ``index``: the storm's place in ``report.storms``;
    ``then``: what the monitor did besides warning (a fallback), said on the last line.

    Example:
        >>> from xla_keras.storms.fixes import PadToLengths
        >>> storm = Storm("train", 9, 8, [{"path": "x", "axis": 1, "min": 54, "max": 79, "n_values": 8}],
        ...               "...", PadToLengths(), compiles=8, compile_seconds=2.0)
        >>> print(storm_text(storm, 0))
        Recompilation storm (train): 8 new input shapes in 10 steps, 8 compiles, 2.0 s compiling
        Cause: input 'x' axis 1 varies (54..79, 8 values)
        Fix: ds = xla_keras.data.apply_fix(ds, monitor.report.storms[0].fix)
        More: monitor.report.storms[0].advice
    """
    steady = storm.steady_step_seconds
    what = storm_what(storm)
    headline = within(  # the figures give way, in this order, before the line passes 100 characters
        f"Recompilation storm ({storm.phase}): {storm.count} {what} in "
        f"{storm.step - storm.window_start + 1} steps, {storm.compiles} compiles",
        f", {_fmt_ms(storm.compile_seconds)} compiling",
        f" vs {_fmt_ms(steady)} a step" if steady is not None else "",
    )
    fix = within(f"Fix: {fix_line(storm.fix, f'monitor.report.storms[{index}].fix', data)}", so_far(storm.fix))
    more = f"{then}More: monitor.report.storms[{index}].advice"
    more = within(
        more if len(more) <= WIDTH else f"{then}More: print(monitor.report)",
        *((", the XLA tab", f", `xla-keras report {log_dir}`") if log_dir else ()),
    )
    values = values_words(storm.fix)
    cause = within(f"Cause: {storm_cause(storm)}", f"; {values}" if values else "")
    return shaped([headline, cause, fix, more])


def storm_what(storm: Storm) -> str:
    """What a storm counts: new input shapes, or compiles at known shapes (a value, JAX's context)."""
    return "new input shapes" if storm.cause in (None, "signature") else "compiles at known shapes"


def storm_cause(storm: Storm) -> str:
    """The storm's cause as one clause: the input and axis that vary, with their range (or what made
    the step compile at known shapes)."""
    if storm.cause not in (None, "signature", "value") and not storm.varying:
        return {
            "context": "JAX's tracing context changed (its config): see the advice",
            "placement": "the same shapes, placed or typed differently (device, sharding, weak type)",
            "retrace": "the step function traced again at known shapes",
        }.get(storm.cause or "", "compiles at known shapes: see the advice")
    return cause_clause(storm.varying, storm.fix)


def partial_batch_note(phase: str, history: ShapeHistory) -> Optional[str]:
    """A partial last batch costs one extra compile: worth a line, never a storm."""
    partial = partial_batch_signatures(history)
    if not partial:
        return None
    rows, full = next(iter(partial.values()))
    if phase == "train":
        return (
            f"train: the last batch of each epoch has {rows} rows instead of {full}: one extra compile "
            "for this phase (no storm by itself); batch with drop_remainder=True to avoid it"
        )
    return (
        f"{phase}: the last batch of each run has {rows} rows instead of {full}: one extra compile for this "
        "phase (no storm by itself), which keeps every example; pad it to the full size to avoid it "
        "(drop_remainder=True would drop examples from the results)"
    )


def train_vs_validation_note(train: ShapeHistory, test: ShapeHistory) -> Optional[str]:
    """Validation batches shaped unlike training batches: say why that costs
    no extra compile (the test function is a separate XLA program that compiles
    its own shapes anyway), so it is not mistaken for a storm cause."""
    if not train.batches or not test.batches:
        return None
    main_train = train.signatures[max(train.batches, key=lambda fp: train.batches[fp])]
    main_test = test.signatures[max(test.batches, key=lambda fp: test.batches[fp])]
    changes = [c for c in diff(main_train, main_test) if c.axis is not None]
    if not changes:
        return None
    described = ", ".join(
        f"'{c.path}' axis {c.axis}: {c.old} in training vs {c.new} in validation" for c in changes[:3]
    )
    return (
        f"validation batches are shaped unlike training batches ({described}); the validation step "
        "is a separate XLA program that compiles its own shapes anyway, so this costs no extra compile"
    )
