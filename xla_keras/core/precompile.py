"""Precompile: the shape set a phase is compiled for before its first step. Pure.

``XlaMonitor(precompile=...)`` names the set one of three ways, each read here into input signatures
(``core/signatures.py``: XLA's cache key) on the template of the phase's first batch, whose structure
and dtypes every signature of the set must share:

* ``"auto"``: the lengths a fix ``xla_keras.data`` applied in this process gives its targets (a
  ``bucket_by_length`` / ``pad_to_lengths`` dataset: one signature per length, at the first batch's
  rows), else the signatures the last report in the log dir compiled for this phase, else nothing;
* a path to an ``xla_report.json`` or a log dir holding one: the signatures its ledger compiled;
* a list of batch specs (``keras.InputSpec``, ``tf.TensorSpec``, ``jax.ShapeDtypeStruct``, numpy
  arrays: anything with a ``shape`` and a ``dtype``) in the batch's structure, e.g.
  ``[(tf.TensorSpec((32, 64), tf.int32), tf.TensorSpec((32,), tf.float32)), ...]``.

What the backend does with the set is in ``backends/<name>/precompile.py``.
"""

from __future__ import annotations

import itertools
import json
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, List, Literal, Optional, Sequence, Tuple, Union

from xla_keras.core.signatures import InputSignature, Leaf, describe, from_jsonable, map_leaves, signature_of

OnNewSignature = Literal["warn", "raise"]
ON_NEW_SIGNATURE: Tuple[OnNewSignature, ...] = ("warn", "raise")
REPORT_FILE = "xla_report.json"
# At most this many signatures per phase: a set larger than this is a storm, not a shape set.
MAX_SIGNATURES = 64

# What ``precompile`` holds once validated: None, "auto", a report's path, or the signatures given.
PrecompileSource = Union[None, str, Tuple[InputSignature, ...]]

CHOICES_WORDS = (
    "precompile must be None, 'auto', a path to an xla_report.json or a log dir, or a list of batch specs "
    "(objects with a shape and a dtype, e.g. tf.TensorSpec, keras.InputSpec, jax.ShapeDtypeStruct)"
)


def validate_precompile(value: Any) -> PrecompileSource:
    """``precompile`` as given, checked: None, ``"auto"``, a path (str or ``os.PathLike``, ``~`` expanded)
    or the signatures of a list of batch specs, each with concrete dims.

    Raises:
        ValueError: a value that is none of those, or a spec with an unknown dim (the message names the choices).
    """
    if value is None or isinstance(value, str) and value == "auto":
        return value
    if isinstance(value, (str, os.PathLike)):
        return os.path.expanduser(os.fspath(value))
    if isinstance(value, (list, tuple)) and value:
        signatures = []
        for index, spec in enumerate(value):
            try:
                signature = signature_of(spec)
            except Exception as error:  # noqa: BLE001 - a spec the walker cannot read: the user's to fix
                raise ValueError(f"{CHOICES_WORDS}; spec {index} cannot be read: {error}") from None
            if not signature:
                raise ValueError(f"{CHOICES_WORDS}; spec {index} holds no shape: {spec!r}")
            unknown = [leaf.describe() for leaf in signature if any(d is None for d in leaf.shape)]
            if unknown:
                raise ValueError(
                    f"precompile: spec {index} has an unknown dim ({', '.join(unknown)}): XLA compiles concrete "
                    "shapes, give one spec per shape"
                )
            if signature not in signatures:
                signatures.append(signature)
        if len(signatures) > MAX_SIGNATURES:
            raise ValueError(f"precompile: {len(signatures)} distinct specs, more than {MAX_SIGNATURES} (a storm)")
        return tuple(signatures)
    raise ValueError(f"{CHOICES_WORDS}; got {value!r}")


def validate_on_new_signature(value: Any) -> OnNewSignature:
    for choice in ON_NEW_SIGNATURE:
        if value == choice:
            return choice
    raise ValueError(f"on_new_signature must be one of {', '.join(map(repr, ON_NEW_SIGNATURE))}; got {value!r}")


def validate_threads(value: Any) -> Optional[int]:
    if value is None or isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise ValueError(f"precompile_threads must be an int >= 1 or None (the machine's cores); got {value!r}")


@dataclass(frozen=True)
class ShapeSet:
    """The signatures a phase precompiles, where they come from (in words), and why some were left out."""

    signatures: Tuple[InputSignature, ...]
    source: str
    left_out: Tuple[str, ...] = field(default=())


def same_structure(a: InputSignature, b: InputSignature) -> bool:
    """The same leaves (paths), dtypes and ranks: one batch tree, shapes aside."""
    return len(a) == len(b) and all(
        x.path == y.path and x.dtype == y.dtype and len(x.shape) == len(y.shape) for x, y in zip(a, b)
    )


def structure_words(signature: InputSignature) -> str:
    return ", ".join(f"{leaf.path}:{leaf.dtype} rank {len(leaf.shape)}" for leaf in signature)


def from_specs(specs: Tuple[InputSignature, ...], template: InputSignature) -> ShapeSet:
    """The given specs that fit the phase's batches (their structure and dtypes)."""
    kept = tuple(s for s in specs if same_structure(s, template))
    left = tuple(
        f"spec {describe(s)} does not match the batches ({structure_words(template)})"
        for s in specs
        if not same_structure(s, template)
    )
    return ShapeSet(kept, f"the {len(specs)} specs given", left)


def report_path(path: str) -> str:
    """The report file a path names: the file itself, or ``xla_report.json`` in a log dir."""
    return os.path.join(path, REPORT_FILE) if os.path.isdir(path) else path


def signatures_in_report(path: str, phase: str) -> List[InputSignature]:
    """The distinct signatures a saved report's ledger compiled for ``phase`` (its step's own programs), in
    order. Raises OSError / ValueError for a file that cannot be read as a report."""
    with open(report_path(path), encoding="utf-8") as handle:
        data = json.load(handle)
    if not isinstance(data, dict) or not isinstance(data.get("compilations"), list):
        raise ValueError(f"{report_path(path)} holds no report (no 'compilations')")
    found: List[InputSignature] = []
    for record in data["compilations"]:
        if not isinstance(record, dict) or record.get("phase") != phase or record.get("outside_step"):
            continue
        signature = from_jsonable(record.get("signature") or ())
        if signature and all(d is not None for leaf in signature for d in leaf.shape) and signature not in found:
            found.append(signature)
    return found


def from_report(path: str, phase: str, template: InputSignature) -> ShapeSet:
    """The signatures a saved report compiled for ``phase`` that fit its batches now."""
    return _fitting(signatures_in_report(path, phase), template, f"the report {report_path(path)}")


def _fitting(found: Sequence[InputSignature], template: InputSignature, source: str) -> ShapeSet:
    """Of a report's signatures, those of the batches' structure (at most ``MAX_SIGNATURES``)."""
    kept = tuple(s for s in found if same_structure(s, template))
    left = () if len(kept) == len(found) else (f"{len(found) - len(kept)} of its signatures have another structure",)
    return ShapeSet(kept[:MAX_SIGNATURES], source, left)


def from_applied(applied: Iterable[Tuple[str, Tuple[Tuple[str, int, Tuple[int, ...]], ...]]], template: InputSignature):
    """The shapes a fix ``xla_keras.data`` applied gives batches like ``template``: each length of its targets
    (targets sharing one list of lengths take them together, as a bucket pads them), at the template's other
    dims. The latest fix whose targets the template holds, at one of their lengths, is the data's; None when
    no fix matches."""
    by_path = {leaf.path: leaf for leaf in template}
    for kind, targets in reversed(tuple(applied)):
        usable = [(p, a, lengths) for p, a, lengths in targets if p in by_path and a < len(by_path[p].shape)]
        if len(usable) != len(targets) or not usable:
            continue
        if not all(by_path[p].shape[a] in lengths for p, a, lengths in usable):
            continue  # not this data (the first batch is at none of its lengths)
        groups: dict = {}
        for p, a, lengths in usable:
            groups.setdefault(tuple(lengths), []).append((p, a))
        signatures: List[InputSignature] = []
        for choice in itertools.product(*groups):
            if len(signatures) >= MAX_SIGNATURES:
                break
            sizes = {(p, a): length for length, members in zip(choice, groups.values()) for p, a in members}
            signatures.append(_with_sizes(template, sizes))
        return ShapeSet(tuple(dict.fromkeys(signatures)), f"the {kind} fix applied to the data")
    return None


def _with_sizes(template: InputSignature, sizes: dict) -> InputSignature:
    def leaf(item: Leaf) -> Leaf:
        shape = tuple(sizes.get((item.path, axis), d) for axis, d in enumerate(item.shape))
        return Leaf(item.path, item.dtype, shape)

    return tuple(leaf(item) for item in template)


def zeros_for(template: Any, signature: InputSignature, zeros: Callable[[Any, Tuple[int, ...]], Any]) -> Any:
    """A batch like ``template`` (its structure) whose tensors are ``zeros(leaf, shape)`` at ``signature``'s
    shapes; a leaf the signature does not hold (a Python scalar) stays as it is."""
    shapes = {leaf.path: tuple(int(d or 0) for d in leaf.shape) for leaf in signature}
    return map_leaves(template, lambda path, leaf: zeros(leaf, shapes[path]) if path in shapes else leaf)


def previous_signatures(log_dir: Optional[str]) -> Optional[dict]:
    """The signatures the last report in ``log_dir`` compiled, per phase (read when a call begins, before the
    monitor writes the new one); None when there is none; a str: why it cannot be read."""
    if log_dir is None or not os.path.exists(report_path(log_dir)):
        return None
    try:
        return {phase: signatures_in_report(log_dir, phase) for phase in ("train", "test", "predict")}
    except (OSError, ValueError) as error:
        return {"error": str(error)}


def resolve(
    source: PrecompileSource,
    phase: str,
    template: InputSignature,
    applied: Sequence[Any] = (),
    previous: Optional[dict] = None,
    log_dir: Optional[str] = None,
) -> ShapeSet:
    """The shape set of ``phase`` named by ``source`` (``precompile``), on the first batch's ``template``;
    ``previous``: ``previous_signatures`` of the log dir when the call began. An empty set says why in
    ``source``."""
    if source is None:
        return ShapeSet((), "precompile=None")
    if isinstance(source, tuple):
        return from_specs(source, template)
    if source != "auto":
        try:
            return from_report(source, phase, template)
        except (OSError, ValueError) as error:
            return ShapeSet((), f"the report at {source} cannot be read ({error})")
    fixed = from_applied(((a.kind, a.targets) for a in applied), template)
    if fixed is not None:
        return fixed
    if previous is not None:
        if "error" in previous:
            return ShapeSet((), f"the log dir's last report cannot be read ({previous['error']})")
        fitting = _fitting(previous.get(phase, []), template, f"the last report in {log_dir}")
        if fitting.signatures:
            return fitting
        return ShapeSet((), f"the last report in {log_dir} holds no {phase} signature of these batches")
    return ShapeSet(
        (),
        "no fix of xla_keras.data was applied to this data and the log dir holds no report yet "
        "(precompile='auto' takes the shapes of either)",
    )


# ------------------------------------------------------------------ what a precompile did, and what came after

# The compiles after a precompile kept in words per phase (all are counted).
MISSED_KEPT = 8


def precompile_facts(facts: dict, results: Sequence[Any], seconds: float) -> dict:
    """``report.precompile[phase]``: ``facts`` (source, threads, left out, withheld) with what the ``results``
    (``core.types.Precompiled``) of a precompile that took ``seconds`` say."""
    compiled = [r for r in results if r.error is None]
    facts = dict(facts)
    facts.update(
        signatures=len(compiled),
        requested=len(results),
        seconds=seconds,
        compile_seconds=sum(r.seconds for r in compiled),
        cached=sum(1 for r in compiled if r.cached),
        failed=[f"{describe(r.signature)}: {r.error}" for r in results if r.error is not None][:MISSED_KEPT],
        in_loop=0,
        missed=[],
    )
    if results and not compiled:
        facts["withheld"] = "no signature of the set compiled ahead (report.precompile[phase]['failed'])"
    return facts


def count_in_loop(facts: dict, records: Sequence[Any]) -> List[Any]:
    """Of a call's compile records, those of the step's own program after the precompile ``facts`` describe:
    counted in them (the first ``MISSED_KEPT`` in words too) and returned. None after a withheld precompile."""
    if facts["withheld"] is not None:
        return []
    found = [r for r in records if not r.precompiled and r.outside_step is None]
    facts["in_loop"] += len(found)
    for record in found[: max(0, MISSED_KEPT - len(facts["missed"]))]:
        facts["missed"].append(
            {"step": record.step, "signature": describe(record.signature), "cause": record.cause, "why": record.why}
        )
    return found
