"""Unit tests for xla_keras.signatures (pure: no TensorFlow, fake tensors only)."""

import json
import os
from collections import namedtuple

import numpy as np
import pytest

from xla_keras.core.signatures import (
    AxisChange,
    Leaf,
    describe,
    diff,
    fingerprint,
    from_jsonable,
    leaves,
    map_leaves,
    signature_of,
    to_jsonable,
)
from xla_keras.data.arrays import NUMPY
from xla_keras.data.batches import pad_lengths
from xla_keras.data.plan import targets_of
from xla_keras.storms.lengths import countable_leaves

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ------------------------------------------------------------------ fakes


class T:
    """A fake tensor: only ``.shape`` and ``.dtype``."""

    def __init__(self, *shape, dtype="float32"):
        self.shape = shape
        self.dtype = dtype


class DType:
    """A dtype object that names itself like tf.DType / np.dtype."""

    def __init__(self, name):
        self.name = name

    def __str__(self):
        return f"<dtype: {self.name!r}>"


class OddDType:
    """A dtype whose ``.name`` is not a string: its str() is used instead."""

    name = 7

    def __str__(self):
        return "odd8"


class Dimension:
    """Like tf.compat.v1.Dimension: the size is in ``.value``."""

    def __init__(self, value):
        self.value = value


class Ragged:
    def __init__(self, flat_values, *row_splits):
        self.flat_values = flat_values
        self.nested_row_splits = row_splits


class Sparse:
    def __init__(self, indices, values, dense_shape):
        self.indices = indices
        self.values = values
        self.dense_shape = dense_shape


class PerReplica:
    """Like tf.distribute's PerReplica: one value per replica in ``.values``."""

    def __init__(self, *values):
        self.values = values


def unwrap_first_replica(value):
    return value.values[0] if isinstance(value, PerReplica) else value


Features = namedtuple("Features", ["tokens", "mask"])


def describes(sig):
    return [leaf.describe() for leaf in sig]


# ------------------------------------------------------------------ signature_of


@pytest.mark.parametrize(
    "batch, expected",
    [
        ((T(8, 5),), ["x:float32[8,5]"]),
        ((T(8, 5), T(8, 1)), ["x:float32[8,5]", "y:float32[8,1]"]),
        ((T(8, 5), T(8, 1), T(8)), ["x:float32[8,5]", "y:float32[8,1]", "sample_weight:float32[8]"]),
        ([T(8, 5), T(8, 1)], ["x:float32[8,5]", "y:float32[8,1]"]),
        (T(8, 5), ["x:float32[8,5]"]),
        ((T(4, 2), None, T(4)), ["x:float32[4,2]", "sample_weight:float32[4]"]),
        ((T(1), T(2), T(3), T(4)), ["x/0:float32[1]", "x/1:float32[2]", "x/2:float32[3]", "x/3:float32[4]"]),
    ],
    ids=["x-only", "x-y", "x-y-sw", "list-batch", "bare-tensor", "none-y-skipped", "four-tuple-is-x"],
)
def test_top_level_naming(batch, expected):
    assert describes(signature_of(batch)) == expected


def test_dict_keys_are_sorted_and_pathed():
    batch = ({"tokens": T(8, 5, dtype="int32"), "age": T(8, 1), "mask": T(8, 5, dtype="bool")}, T(8))
    assert [leaf.path for leaf in signature_of(batch)] == ["x/age", "x/mask", "x/tokens", "y"]


def test_dict_as_whole_batch_is_x():
    assert [leaf.path for leaf in signature_of({"b": T(2), "a": T(3)})] == ["x/a", "x/b"]


def test_nested_lists_and_tuples_use_indices():
    batch = ([T(2, 3), (T(2, 4), [T(2, 5)])], T(2))
    assert describes(signature_of(batch)) == [
        "x/0:float32[2,3]",
        "x/1/0:float32[2,4]",
        "x/1/1/0:float32[2,5]",
        "y:float32[2]",
    ]


def test_namedtuple_uses_field_names():
    batch = (Features(tokens=T(8, 5, dtype="int32"), mask=T(8, 5, dtype="bool")), T(8, 1))
    assert describes(signature_of(batch)) == ["x/tokens:int32[8,5]", "x/mask:bool[8,5]", "y:float32[8,1]"]


def test_top_level_namedtuple_is_split_by_position_like_keras():
    # keras's unpack_x_y_sample_weight treats any 1..3-tuple (namedtuples too) as (x, y, sw).
    batch = Features(tokens=T(8, 5, dtype="int32"), mask=T(8, 5, dtype="bool"))
    assert describes(signature_of(batch)) == ["x:int32[8,5]", "y:bool[8,5]"]


def test_none_leaves_are_skipped_at_any_depth():
    batch = ({"a": None, "b": T(3)}, [None, T(4)])
    assert [leaf.path for leaf in signature_of(batch)] == ["x/b", "y/1"]


def test_python_scalars_and_strings_are_not_leaves():
    batch = ({"n": 3, "name": "abc", "t": T(2)}, 1.5)
    assert [leaf.path for leaf in signature_of(batch)] == ["x/t"]


def test_ragged_is_split_into_components():
    ragged = Ragged(T(17, dtype="int32"), T(9, dtype="int64"), T(5, dtype="int64"))
    sig = signature_of(({"tokens": ragged}, T(8)))
    assert describes(sig) == [
        "x/tokens/flat_values:int32[17]",
        "x/tokens/row_splits_0:int64[9]",
        "x/tokens/row_splits_1:int64[5]",
        "y:float32[8]",
    ]


def test_sparse_is_split_into_components():
    sparse = Sparse(T(11, 2, dtype="int64"), T(11), T(2, dtype="int64"))
    assert describes(signature_of((sparse,))) == [
        "x/indices:int64[11,2]",
        "x/values:float32[11]",
        "x/dense_shape:int64[2]",
    ]


@pytest.mark.parametrize(
    "dtype, expected",
    [
        (DType("bfloat16"), "bfloat16"),
        ("float16", "float16"),
        (OddDType(), "odd8"),
    ],
)
def test_dtype_name_or_str(dtype, expected):
    (leaf,) = signature_of(T(3, dtype=dtype))
    assert leaf.dtype == expected


def test_shapes_keep_none_dims_and_unwrap_dimension_objects():
    (leaf,) = signature_of(T(None, Dimension(5), Dimension(None), 3))
    assert leaf.shape == (None, 5, None, 3)
    assert all(d is None or type(d) is int for d in leaf.shape)
    assert leaf.describe() == "x:float32[?,5,?,3]"


def test_scalar_leaf_has_empty_shape():
    (leaf,) = signature_of(T())
    assert leaf == Leaf("x", "float32", ())
    assert leaf.describe() == "x:float32[]"


def test_unwrap_is_applied_to_each_leaf():
    batch = (PerReplica(T(4, 3), T(4, 3)), PerReplica(T(4, 1), T(4, 1)))
    assert describes(signature_of(batch, unwrap=unwrap_first_replica)) == ["x:float32[4,3]", "y:float32[4,1]"]


def test_unwrap_is_applied_to_the_whole_batch():
    batch = PerReplica((T(4, 3), T(4, 1)), (T(4, 3), T(4, 1)))
    assert describes(signature_of(batch, unwrap=unwrap_first_replica)) == ["x:float32[4,3]", "y:float32[4,1]"]


def test_without_unwrap_a_wrapper_is_not_a_tensor():
    batch = (PerReplica(T(4, 3)), T(4, 1))
    # The wrapper has no .shape/.dtype: without unwrap it contributes nothing.
    assert [leaf.path for leaf in signature_of(batch)] == ["y"]


# ------------------------------------------------------------------ no host sync


class HostSync(Exception):
    """Raised by anything that would read a tensor's value."""


class NoSyncTensor:
    """Only ``shape`` and ``dtype`` can be read; everything else raises.

    Missing attributes raise AttributeError (as on a real tensor, so duck-typing
    probes with hasattr still work); anything that would copy the value to the
    host raises HostSync.
    """

    _ALLOWED = ("shape", "dtype", "__class__")
    _SYNC = (
        "numpy",
        "__array__",
        "item",
        "tolist",
        "value",
        "_value",
        "__array_interface__",
        "__array_struct__",
        "__dlpack__",
    )

    def __init__(self, shape, dtype):
        object.__setattr__(self, "_sig", (tuple(shape), DType(dtype)))

    def __getattribute__(self, name):
        sig = object.__getattribute__(self, "_sig")
        if name == "shape":
            return sig[0]
        if name == "dtype":
            return sig[1]
        if name in NoSyncTensor._ALLOWED:
            return object.__getattribute__(self, name)
        if name in NoSyncTensor._SYNC:
            raise HostSync(name)
        raise AttributeError(name)

    def __getattr__(self, name):
        raise AttributeError(name)

    def numpy(self):
        raise HostSync("numpy")

    def __array__(self, *args, **kwargs):
        raise HostSync("__array__")

    def __len__(self):
        raise HostSync("__len__")

    def __iter__(self):
        raise HostSync("__iter__")

    def __bool__(self):
        raise HostSync("__bool__")

    def __int__(self):
        raise HostSync("__int__")

    def __float__(self):
        raise HostSync("__float__")

    def __index__(self):
        raise HostSync("__index__")

    def __eq__(self, other):
        raise HostSync("__eq__")

    def __hash__(self):
        raise HostSync("__hash__")

    def __repr__(self):
        raise HostSync("__repr__")

    __str__ = __repr__


def test_no_host_sync_fake_really_raises():
    t = NoSyncTensor((2,), "float32")
    for probe in (lambda: t.numpy(), lambda: len(t), lambda: bool(t), lambda: list(t), lambda: float(t)):
        with pytest.raises(HostSync):
            probe()
    with pytest.raises(AttributeError):
        t.flat_values  # noqa: B018


def test_signature_reads_only_shape_and_dtype():
    ragged = Ragged(NoSyncTensor((17,), "int32"), NoSyncTensor((9,), "int64"))
    batch = (
        {"tokens": NoSyncTensor((8, None), "int32"), "ragged": ragged},
        NoSyncTensor((8, 1), "float32"),
        NoSyncTensor((8,), "float32"),
    )
    assert describes(signature_of(batch)) == [
        "x/ragged/flat_values:int32[17]",
        "x/ragged/row_splits_0:int64[9]",
        "x/tokens:int32[8,?]",
        "y:float32[8,1]",
        "sample_weight:float32[8]",
    ]


def test_no_host_sync_under_unwrap():
    batch = PerReplica((NoSyncTensor((4, 3), "float32"), NoSyncTensor((4,), "int32")))
    assert describes(signature_of(batch, unwrap=unwrap_first_replica)) == ["x:float32[4,3]", "y:int32[4]"]


# ------------------------------------------------------------------ diff


def sig(*leaves):
    return tuple(Leaf(p, d, s) for p, d, s in leaves)


BASE = sig(("x/tokens", "int32", (8, 5)), ("y", "float32", (8, 1)))


@pytest.mark.parametrize(
    "new, expected",
    [
        (BASE, []),
        (sig(("x/tokens", "int32", (8, 9)), ("y", "float32", (8, 1))), [AxisChange("x/tokens", 1, 5, 9)]),
        (
            sig(("x/tokens", "int32", (4, 9)), ("y", "float32", (4, 1))),
            [AxisChange("x/tokens", 0, 8, 4), AxisChange("x/tokens", 1, 5, 9), AxisChange("y", 0, 8, 4)],
        ),
        (sig(("x/tokens", "int32", (8, None)), ("y", "float32", (8, 1))), [AxisChange("x/tokens", 1, 5, None)]),
        (
            sig(("x/tokens", "int64", (8, 5)), ("y", "float32", (8, 1))),
            [AxisChange("x/tokens", None, "x/tokens:int32[8,5]", "x/tokens:int64[8,5]")],
        ),
        (
            sig(("x/tokens", "int32", (8, 5, 1)), ("y", "float32", (8, 1))),
            [AxisChange("x/tokens", None, "x/tokens:int32[8,5]", "x/tokens:int32[8,5,1]")],
        ),
        (
            sig(("x/tokens", "int32", (8, 5)), ("y", "float32", (8, 1)), ("sample_weight", "float32", (8,))),
            [AxisChange("sample_weight", None, None, "sample_weight:float32[8]")],
        ),
        (sig(("x/tokens", "int32", (8, 5))), [AxisChange("y", None, "y:float32[8,1]", None)]),
    ],
    ids=["same", "one-axis", "batch-and-length", "to-none", "dtype", "rank", "added", "removed"],
)
def test_diff(new, expected):
    assert diff(BASE, new) == expected


def test_diff_added_and_removed_together():
    old = sig(("x/a", "float32", (2,)))
    new = sig(("x/b", "float32", (2,)))
    changes = diff(old, new)
    assert sorted(changes) == sorted(
        [
            AxisChange("x/b", None, None, "x/b:float32[2]"),
            AxisChange("x/a", None, "x/a:float32[2]", None),
        ]
    )


# ------------------------------------------------------------------ fingerprint, json, describe


def test_fingerprint_equal_for_equal_signatures():
    a = signature_of(({"tokens": T(8, 5, dtype="int32")}, T(8, 1)))
    b = signature_of(({"tokens": T(8, 5, dtype=DType("int32"))}, T(8, 1)))
    assert a is not b
    assert fingerprint(a) == fingerprint(b)


@pytest.mark.parametrize(
    "other",
    [
        sig(("x/tokens", "int32", (8, 6)), ("y", "float32", (8, 1))),
        sig(("x/tokens", "int64", (8, 5)), ("y", "float32", (8, 1))),
        sig(("x/words", "int32", (8, 5)), ("y", "float32", (8, 1))),
        sig(("x/tokens", "int32", (8, None)), ("y", "float32", (8, 1))),
        sig(("x/tokens", "int32", (8, 5))),
        sig(("y", "float32", (8, 1)), ("x/tokens", "int32", (8, 5))),
    ],
)
def test_fingerprint_differs_for_different_signatures(other):
    assert fingerprint(BASE) != fingerprint(other)


def test_json_round_trip():
    original = sig(("x/tokens", "int32", (8, None)), ("y", "float32", (8, 1)), ("s", "float32", ()))
    items = to_jsonable(original)
    assert items == [
        {"path": "x/tokens", "dtype": "int32", "shape": [8, None]},
        {"path": "y", "dtype": "float32", "shape": [8, 1]},
        {"path": "s", "dtype": "float32", "shape": []},
    ]
    back = from_jsonable(json.loads(json.dumps(items)))
    assert back == original
    assert all(isinstance(leaf.shape, tuple) for leaf in back)
    assert fingerprint(back) == fingerprint(original)


def test_describe():
    assert describe(BASE) == "x/tokens:int32[8,5] y:float32[8,1]"
    assert describe(sig(("x", "float32", (None, 3)))) == "x:float32[?,3]"
    assert describe(()) == "(no tensor inputs)"


# ------------------------------------------------------------------ one walker, three users

Wide = namedtuple("Wide", ["a", "b", "c", "d"])


def ids(*shape):
    return np.ones(shape, np.int32)


@pytest.mark.parametrize(
    "batch, paths",
    [
        (Features(ids(2, 3), ids(2, 4)), ["x", "y"]),  # top level: split by position, as Keras unpacks it
        ([Features(ids(2, 3), ids(2, 4))], ["x/tokens", "x/mask"]),
        ((Features(ids(2, 3), ids(2, 4)), ids(2, 1)), ["x/tokens", "x/mask", "y"]),
        (
            ({"b": Features(ids(2, 3), ids(2, 4)), "a": [ids(2, 2)]}, ids(2, 1)),
            ["x/a/0", "x/b/tokens", "x/b/mask", "y"],
        ),
        (Wide(ids(2, 1), ids(2, 2), ids(2, 3), ids(2, 4)), ["x/a", "x/b", "x/c", "x/d"]),  # 4 fields: all of it is x
    ],
    ids=["top-level", "in-a-1-list", "nested", "nested-in-dict", "top-level-4-fields"],
)
def test_signatures_data_and_lengths_name_namedtuple_leaves_alike(batch, paths):
    assert [leaf.path for leaf in signature_of(batch)] == paths
    assert [path for path, _ in leaves(batch)] == paths
    # The length sample keys its arrays by the same paths (all leaves here are int32 of rank 2).
    assert list(countable_leaves(batch)) == paths
    # A fix that targets every path pads every leaf, and the batch keeps its types.
    fix = {"kind": "pad_to_lengths", "targets": [{"path": p, "axis": 1, "lengths": [8]} for p in paths]}
    padded = pad_lengths(batch, targets_of(fix, "pad_to_lengths", lengths=True, min_axis=0), NUMPY)
    assert type(padded) is type(batch)
    assert [(path, leaf.shape) for path, leaf in leaves(padded)] == [(p, (2, 8)) for p in paths]


def test_map_leaves_rebuilds_the_structure_in_the_users_order():
    batch = ({"b": 1, "a": Features(2, None)}, [3, (4,)])
    visited = []
    out = map_leaves(batch, lambda path, leaf: visited.append(path) or leaf * 10)
    assert visited == ["x/a/tokens", "x/b", "y/0", "y/1/0"]  # signature_of's order
    assert out == ({"b": 10, "a": Features(20, None)}, [30, (40,)])
    assert list(out[0]) == ["b", "a"] and type(out[0]["a"]) is Features and type(out[1]) is list
