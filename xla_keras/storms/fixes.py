"""Fix kinds: a storm's machine-readable ``fix`` as one typed record per kind (``Fix``), what each kind
says (its value, its cause, the one line of ``xla_keras.data`` code that applies it: the only places
that dispatch on the kind, each an exhaustive ``match``), and the partial last batch of each run in words.

Saved reports and the fix code printed in them hold these kinds and keys: they never change. A ``Fix``
is also a read-only mapping of exactly those keys (``fix["kind"]``, ``dict(fix)``), so code written
against the dicts of earlier versions keeps working.
"""

from __future__ import annotations

import dataclasses
import pprint
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, Iterator, List, NamedTuple, Optional, Tuple, Union

from xla_keras.core.plain_data import OMIT_NONE, known_fields, record_dict
from xla_keras.core.types import assert_never

PAD_TO_LENGTHS = "pad_to_lengths"
FIXED_BATCH_SIZE = "fixed_batch_size"
DROP_REMAINDER = "drop_remainder"
PAD_REMAINDER = "pad_remainder"
# Also the key of the bucketing part that a pad_to_lengths fix may hold (a fix of this kind).
BUCKET_BY_LENGTH = "bucket_by_length"
# Also the key of the exact alternative a pad_to_lengths fix of images may hold (a fix of this kind).
BUCKET_BY_SIZE = "bucket_by_size"
CONSISTENT_STRUCTURE = "consistent_structure"
STATIC_VALUE = "static_value"
UNKNOWN = "unknown"

# The kinds xla_keras.data.apply_fix applies; bucket_by_length has its own function (it needs unbatched data).
APPLIED_KINDS = (PAD_TO_LENGTHS, FIXED_BATCH_SIZE, DROP_REMAINDER, PAD_REMAINDER, BUCKET_BY_SIZE)
"""The fix kinds ``xla_keras.data.apply_fix`` applies (a storm's ``fix["kind"]``).

``"bucket_by_size"`` is the exact alternative a ``pad_to_lengths`` fix of images holds
(``fix["bucket_by_size"]``). The others: ``"bucket_by_length"`` has its own function
(``xla_keras.data.bucket_by_length``, on unbatched examples); ``"consistent_structure"``, ``"static_value"``
and ``"unknown"`` are changes to make by hand, which the storm's advice names.

Example:
    ```pycon
    >>> xla_keras.data.APPLIED_KINDS
    ('pad_to_lengths', 'fixed_batch_size', 'drop_remainder', 'pad_remainder', 'bucket_by_size')

    ```
"""
# Kinds that no code can apply: the user changes the pipeline by hand.
MANUAL_KINDS = (CONSISTENT_STRUCTURE, STATIC_VALUE, UNKNOWN)
KINDS = APPLIED_KINDS + (BUCKET_BY_LENGTH,) + MANUAL_KINDS

# A fix's "remainder": what becomes of a batch with fewer rows than its "batch_size".
DROP = "drop"
PAD = "pad"
REMAINDERS = (DROP, PAD, None)


def _held() -> Any:
    """A key a fix of its kind holds only when it has a value (older reports may lack it too)."""
    return dataclasses.field(default=None, metadata={OMIT_NONE: True})


class FixRecord(Mapping[str, Any]):
    """What every fix kind shares: its ``kind``, its JSON form derived from its fields, and the
    read-only mapping of that form (``fix["kind"]``, ``fix.get("size")``, ``dict(fix)``)."""

    kind: ClassVar[str]

    def to_dict(self) -> Dict[str, Any]:
        """The fix as the report's JSON holds it: ``kind`` first, then the fields it holds."""
        return {"kind": self.kind, **record_dict(self)}

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_dict()!r})"


@dataclass(frozen=True, eq=False, repr=False)
class BucketByLength(FixRecord):
    """Group single examples by real length into buckets, each padded to its bound
    (``xla_keras.data.bucket_by_length``)."""

    kind: ClassVar[str] = BUCKET_BY_LENGTH
    length_of: Optional[Dict[str, Any]] = _held()  # {"path", "axis", "rank"}: the leaf whose length sorts
    lengths: Optional[List[int]] = _held()
    targets: Optional[List[Dict[str, Any]]] = _held()  # [{"path", "axis"}]: the leaves padded
    batch_size: Optional[int] = None
    remainder: Optional[str] = None
    compiles: Optional[int] = _held()
    real_padding_overhead: Optional[float] = _held()
    examples_per_epoch: Optional[int] = _held()
    dropped_per_epoch: Optional[int] = _held()
    padded_rows_per_epoch: Optional[int] = _held()
    code: Optional[str] = _held()


# A bucket_by_size fix groups rows by their sizes on at most this many axes.
MAX_GROUP_AXES = 3


@dataclass(frozen=True, eq=False, repr=False)
class BucketBySize(FixRecord):
    """Regroup the rows of batches by their size on ``targets`` (an image's height and width), each
    group batched to ``batch_size`` rows: one compile per size, nothing padded, every value exact."""

    kind: ClassVar[str] = BUCKET_BY_SIZE
    targets: Optional[List[Dict[str, Any]]] = _held()  # [{"path", "axis"}]: the axes whose sizes group rows
    sizes: Optional[List[List[int]]] = _held()  # the sizes seen, one per group, in the order of ``targets``
    batch_size: Optional[int] = None
    remainder: Optional[str] = None
    compiles: Optional[int] = _held()
    examples_per_epoch: Optional[int] = _held()  # rows per epoch (run), or seen so far before one ended
    dropped_per_epoch: Optional[int] = _held()
    padded_rows_per_epoch: Optional[int] = _held()
    code: Optional[str] = _held()
    data: Optional[str] = _held()


@dataclass(frozen=True, eq=False, repr=False)
class PadToLengths(FixRecord):
    """Pad the varying axes to a few lengths (``targets``), batched to a fixed size."""

    kind: ClassVar[str] = PAD_TO_LENGTHS
    path: Optional[str] = _held()
    axis: Optional[int] = _held()
    lengths: Optional[List[int]] = _held()
    targets: Optional[List[Dict[str, Any]]] = _held()  # [{"path", "axis", "lengths"}]
    batch_size: Optional[int] = None
    remainder: Optional[str] = None
    drop_remainder: Optional[bool] = _held()
    padding_overhead: Optional[float] = _held()
    compiles: Optional[int] = _held()
    per_input: Optional[List[Dict[str, Any]]] = _held()  # several varying inputs: each one's lengths
    code: Optional[str] = _held()
    data: Optional[str] = _held()
    real_lengths: Optional[Dict[str, Any]] = _held()  # the sampled batches' real lengths, or why not
    batches_real_padding_overhead: Optional[float] = _held()
    real_padding_overhead: Optional[float] = _held()
    bucket_by_length: Optional[BucketByLength] = _held()  # bucketing offered instead
    compute_ratio: Optional[float] = _held()
    better_fix: Optional[str] = _held()
    # Zero-padding changes what the model computes (float images padded on their spatial axes):
    # {"inputs", "layers" (this model's layers that pool or normalise over the padded pixels), "reason"}.
    padding_changes_values: Optional[Dict[str, Any]] = _held()
    bucket_by_size: Optional[BucketBySize] = _held()  # the exact alternative: batches of one size each
    resize: Optional[Dict[str, Any]] = _held()  # advice only: {"inputs", "size", "compiles", "code"}


@dataclass(frozen=True, eq=False, repr=False)
class FixedBatchSize(FixRecord):
    """Re-batch to one batch size (``size``)."""

    kind: ClassVar[str] = FIXED_BATCH_SIZE
    path: Optional[str] = _held()
    size: Optional[int] = _held()
    batch_size: Optional[int] = _held()
    remainder: Optional[str] = _held()
    drop_remainder: Optional[bool] = _held()
    code: Optional[str] = _held()
    data: Optional[str] = _held()


@dataclass(frozen=True, eq=False, repr=False)
class DropRemainder(FixRecord):
    """Drop each run's partial last batch (``rows`` rows instead of ``batch_size``)."""

    kind: ClassVar[str] = DROP_REMAINDER
    rows: Optional[int] = _held()
    batch_size: Optional[int] = _held()
    remainder: Optional[str] = _held()
    code: Optional[str] = _held()
    data: Optional[str] = _held()


@dataclass(frozen=True, eq=False, repr=False)
class PadRemainder(FixRecord):
    """Pad each run's partial last batch to ``batch_size`` rows that weigh nothing."""

    kind: ClassVar[str] = PAD_REMAINDER
    rows: Optional[int] = _held()
    batch_size: Optional[int] = _held()
    remainder: Optional[str] = _held()
    code: Optional[str] = _held()
    data: Optional[str] = _held()


@dataclass(frozen=True, eq=False, repr=False)
class ConsistentStructure(FixRecord):
    """Feed every batch with the same structure and dtypes: a change made by hand."""

    kind: ClassVar[str] = CONSISTENT_STRUCTURE


@dataclass(frozen=True, eq=False, repr=False)
class StaticValue(FixRecord):
    """Make a value XLA needs as a compile-time constant static (``jit/value_keys.py``): the step computes
    it from its data, so XLA compiles again for each new value. A change made by hand in the layer."""

    kind: ClassVar[str] = STATIC_VALUE
    op: Optional[str] = _held()  # TensorFlow's op type, e.g. "TopKV2"
    input: Optional[str] = _held()  # the op's input XLA needs as a constant, e.g. "k"
    node: Optional[str] = _held()
    layer: Optional[str] = _held()
    line: Optional[str] = _held()  # the user's source line that made the op
    inputs: Optional[List[str]] = _held()  # the step's inputs the value is computed from
    weights: Optional[List[str]] = _held()  # the variables it is computed from
    change: Optional[str] = _held()  # how to make it static, in words


@dataclass(frozen=True, eq=False, repr=False)
class UnknownFix(FixRecord):
    """No single input explains the new signatures: no fix from the shapes alone."""

    kind: ClassVar[str] = UNKNOWN


Fix = Union[
    PadToLengths,
    FixedBatchSize,
    DropRemainder,
    PadRemainder,
    BucketBySize,
    BucketByLength,
    ConsistentStructure,
    StaticValue,
    UnknownFix,
]
"""A storm's (or a compile budget advice's) fix: one record per kind."""

APPLIED_TYPES = (PadToLengths, FixedBatchSize, DropRemainder, PadRemainder, BucketBySize)  # of APPLIED_KINDS
FIX_TYPES: Dict[str, type] = {
    cls.kind: cls for cls in (*APPLIED_TYPES, BucketByLength, ConsistentStructure, StaticValue, UnknownFix)
}


class AppliedLengths(NamedTuple):
    """A fix ``xla_keras.data`` applied in this process, as the lengths its targets take after it: the
    advice of a later fit recognises data whose shapes are exactly these (it does not pad them again)."""

    kind: str
    targets: Tuple[Tuple[str, int, Tuple[int, ...]], ...]  # (path, batched axis, the lengths it takes)


def fix_from_dict(data: Any) -> Fix:
    """A fix read back from its JSON form (unknown keys ignored; a kind this version does not know reads
    as ``UnknownFix``)."""
    if isinstance(data, FixRecord):
        return data  # type: ignore[return-value]
    kind = (data or {}).get("kind")
    cls = FIX_TYPES.get(kind, UnknownFix) if isinstance(kind, str) else UnknownFix
    fields = known_fields(cls, data or {})
    for nested in (BUCKET_BY_LENGTH, BUCKET_BY_SIZE):
        if isinstance(fields.get(nested), Mapping):
            fields[nested] = fix_from_dict(fields[nested])
    return cls(**fields)


def fix_value(fix: Fix) -> str:
    """What a fix sets, in a few words (``"size 25"``, ``"lengths [32, 64]"``; empty when the fix
    does not say): two fixes with the same words apply the same change."""
    match fix:
        case FixedBatchSize():
            return f"size {fix.size}" if fix.size else ""
        case PadToLengths():
            lengths = list(dict.fromkeys(str(t["lengths"]) for t in fix.targets or [] if t.get("lengths")))
            if not lengths:
                return ""
            rows = f", batch size {fix.batch_size}" if fix.batch_size else ""
            return "lengths " + "; ".join(lengths) + rows
        case DropRemainder() | PadRemainder():
            return f"batch size {fix.batch_size}" if fix.batch_size else ""
        case BucketBySize():
            rows = f", batch size {fix.batch_size}" if fix.batch_size else ""
            return f"sizes {fix.sizes}{rows}" if fix.sizes else ""
        case BucketByLength() | ConsistentStructure() | StaticValue() | UnknownFix():
            return ""
        case _:
            assert_never(fix)


def so_far(fix: Fix) -> str:
    """The fix's value as the shapes seen so far give it (the report recomputes it at the end)."""
    value = fix_value(fix)
    return f"  # {value} so far" if value else ""


def fix_line(fix: Fix, where: str, data: str = "tf.data") -> str:
    """A fix as one line of code on the user's data (``where``: the expression that holds the fix,
    e.g. ``monitor.report.storms[0].fix``; the data's kind: the fix's ``"data"``, else ``data``), or
    in words when no code applies it."""
    match fix:
        case PadToLengths() | FixedBatchSize() | DropRemainder() | PadRemainder() | BucketBySize():
            name = data_name(fix.data or data)
            return f"{name} = xla_keras.data.apply_fix({name}, {where})"
        case ConsistentStructure():
            return "feed every batch with the same structure and dtypes (cast in the input pipeline)"
        case StaticValue():
            return fix.change or "make the value static"
        case BucketByLength() | UnknownFix():
            return "none from the shapes alone; or XlaMonitor(jit='off') for this model"
        case _:
            assert_never(fix)


def cause_clause(varying: List[Dict[str, Any]], fix: Fix) -> str:
    """A storm's or a compile budget advice's cause as one clause, from what varied and its fix."""
    batch_size = False
    match fix:
        case ConsistentStructure():
            return "the inputs change structure or dtype between batches"
        case DropRemainder() | PadRemainder():
            if fix.rows and fix.batch_size:
                return f"the last batch has {fix.rows} rows instead of {fix.batch_size}"
        case FixedBatchSize():
            batch_size = True
        case StaticValue():
            where = f" in layer {fix.layer!r}" if fix.layer else ""
            return f"{fix.op}'s {fix.input}{where} is computed from the data: XLA compiles once per value"
        case PadToLengths() | BucketBySize():
            varying = sorted(varying, key=lambda v: v.get("axis") == 0)  # what it pads first, not the rows
        case BucketByLength() | UnknownFix():
            pass
        case _:
            assert_never(fix)
    if not varying:
        return "no single input explains the new shapes"
    first = varying[0]
    what = "the batch size (axis 0)" if first.get("axis") == 0 and batch_size else None
    leaf = f"input '{first['path']}' axis {first['axis']}"
    said = f"{what} of input '{first['path']}'" if what else leaf
    more = f" and {len(varying) - 1} more" if len(varying) > 1 else ""
    return f"{said} varies ({first['min']}..{first['max']}, {first['n_values']} values){more}"


def values_words(fix: Fix, where: Optional[str] = None) -> Optional[str]:
    """A pad fix of images in a few words, for a short message: zero-padding them changes the outputs,
    and where the exact alternative is (``where``: the expression that holds the fix; None: not said);
    None for any other fix."""
    if not isinstance(fix, PadToLengths) or not fix.padding_changes_values:
        return None
    if where is None:
        return "zero-padding changes the outputs"
    said = "zero-padding images changes the outputs"
    if fix.bucket_by_size is not None:
        return f"{said}; exact: {where}.bucket_by_size"
    return f"{said} (the advice says what keeps them)"


def recomputed_words(at_storm: Fix, now: Fix) -> str:
    """Why a storm's fix in the report differs from the one its warning was computed with."""

    def words(fix: Fix) -> str:
        return fix_value(fix) or f"a {fix.kind} fix"

    return (
        f"Recomputed from every shape seen by the end: {words(now)} ({words(at_storm)} when the storm "
        "opened, from the shapes seen by then); the warning's line reads this fix from the report."
    )


# A fix as code: the one line that applies it with ``xla_keras.data``, and its compiles in words.


# What the user fed the call (a storm fix's code is written for it): a tf.data.Dataset, arrays
# (numpy / JAX arrays, or nests of them: Keras batches them itself), a keras.utils.PyDataset, or any
# other iterable of batches (a generator, a list).
DATA_KINDS = ("tf.data", "arrays", "pydataset", "generator")
_ARRAY_TYPES = ("ndarray", "Array", "ArrayImpl", "Tensor", "EagerTensor", "DataFrame", "Series")


def data_name(data: str) -> str:
    """The variable a fix's code names the user's data by: ``ds`` (tf.data), ``data`` (a PyDataset),
    ``batches`` (arrays sliced into batches, generators, lists)."""
    return {"tf.data": "ds", "pydataset": "data"}.get(data, "batches")


def data_kind_of(data: Any, default: str) -> str:
    """The kind of ``data`` (one of ``DATA_KINDS``), read from its type; ``default`` when unknown.

    Example:
        >>> import numpy as np
        >>> data_kind_of(np.ones((4, 2)), "tf.data"), data_kind_of((i for i in range(3)), "tf.data")
        ('arrays', 'generator')
    """
    if data is None:
        return default
    kind = type(data)
    if kind.__module__.startswith("tensorflow") and hasattr(data, "element_spec"):
        return "tf.data"
    if any(c.__name__ == "PyDataset" for c in kind.__mro__):
        return "pydataset"
    if isinstance(data, dict):
        data = next(iter(data.values()), None)
    elif isinstance(data, (list, tuple)) and data and not isinstance(data[0], (list, tuple, dict)):
        data = data[0]  # a list of inputs, each an array (a list of batches holds tuples)
    if type(data).__name__ in _ARRAY_TYPES and hasattr(data, "shape"):
        return "arrays"
    return "generator"


CODE_COLUMNS = 100  # a fix's code fits the printed report and the tab's code box


def _call(function: str, fix: Fix, data: str, where: str) -> str:
    """The call that applies ``fix`` with ``xla_keras.data``, with the fix written out so the code
    stands alone (no ``storm`` object needed): one line where it fits ``CODE_COLUMNS``, else the fix
    laid out over lines of at most that width."""
    minimal = {
        k: fix[k]
        for k in ("kind", "targets", "length_of", "lengths", "size", "rows", "batch_size", "remainder")
        if k in fix
    }
    if not isinstance(fix, BucketByLength):
        minimal.pop("lengths", None)  # the targets carry them
    name = data_name(data)
    source = "examples" if function == "bucket_by_length" else name
    line = f"{name} = xla_keras.data.{function}({source}, {minimal!r}){where}"
    if len(line) <= CODE_COLUMNS:
        return f"import xla_keras\n{line}"
    laid_out = pprint.pformat(minimal, width=CODE_COLUMNS - 4, sort_dicts=False).replace("\n", "\n    ")
    return f"import xla_keras\n{name} = xla_keras.data.{function}({where}\n    {source},\n    {laid_out},\n)"


def apply_code(fix: Fix, data: str) -> str:
    where = {
        "tf.data": "  # on the dataset as you batched it",
        "pydataset": "  # your PyDataset -> a keras.utils.PyDataset of fixed batches",
    }.get(data, "  # numpy / generator batches -> a keras.utils.PyDataset")
    return _call("apply_fix", fix, data, where)


def bucket_code(fix: BucketByLength, data: str) -> str:
    where = (
        "  # on the dataset of single examples, before batching"
        if data == "tf.data"
        else "  # an iterable of single examples -> a keras.utils.PyDataset"
    )
    return _call("bucket_by_length", fix, data, where)


def batch_size_call(phase: str, size: object) -> str:
    """The Keras call that batches arrays to ``size`` rows for ``phase``: Keras batches arrays itself."""
    return {
        "train": f"model.fit(x, y, batch_size={size})",
        "test": f"model.evaluate(x, y, batch_size={size}) (in fit: validation_batch_size={size})",
        "predict": f"model.predict(x, batch_size={size})",
    }[phase]


def compiles_words(n: int) -> str:
    return f"{n} compile" + ("" if n == 1 else "s")


# The partial last batch of each epoch (run): what the fix does with it, in words.


REMAINDER = {"train": "drop", "test": "pad", "predict": "pad"}


def examples_words(n: int) -> str:
    return f"{n} example" + ("" if n == 1 else "s")


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
                f"extra compile): the fix drops it, so {examples_words(self.rows)} per epoch are not trained on "
                "(different ones each epoch when the data is shuffled)."
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
