"""xla_keras.data: storm fixes applied to tf.data and to numpy / generator / PyDataset pipelines.

The properties are checked against the original examples, not against the module's own
helpers: every example kept (or exactly the remainder dropped), none cut, every padded axis
an advised length (or the last one doubled), padded rows weighing nothing.
"""

import collections
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xla_keras import data as xd
from xla_keras.core.signatures import leaves, signature_of
from xla_keras.data.arrays import batches_class

# The PyDataset outputs need Keras; importing it here, not inside a hypothesis example, keeps its
# recursion-limit change out of hypothesis's way.
keras = pytest.importorskip("keras")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _examples(full):
    """``full`` examples, scaled as the loaded profile scales hypothesis's default 100 (the quick tier's
    draws a quarter, tests/conftest.py), and at least 4."""
    return max(4, full * settings.default.max_examples // 100)


FAST = settings(max_examples=_examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow])
# tf.data examples build and trace a pipeline each: fewer of them.
FAST_TF = settings(max_examples=_examples(12), deadline=None, suppress_health_check=[HealthCheck.too_slow])


def advised(n, lengths):
    """The length an axis of size n must end up with: the first advised length that holds
    it, else the last one doubled until it does."""
    fits = [length for length in sorted(lengths) if length >= n]
    if fits:
        return fits[0]
    target = max(lengths)
    while target < n:
        target *= 2
    return target


# ------------------------------------------------------------------ cases


Case = collections.namedtuple("Case", "layout labels elements lengths lengths_b batch_size remainder")


@st.composite
def cases(draw, max_examples=30):
    n = draw(st.integers(1, max_examples))
    layout = draw(st.sampled_from(["array", "dict_mask", "two_inputs"]))
    labels = draw(st.sampled_from(["none", "y", "y_sw"]))
    sizes = draw(st.lists(st.integers(1, 70), min_size=n, max_size=n))
    sizes_b = draw(st.lists(st.integers(1, 70), min_size=n, max_size=n))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    elements = []
    for i, (size, size_b) in enumerate(zip(sizes, sizes_b)):
        tokens = rng.integers(1, 100, size).astype(np.int32)
        if layout == "array":
            x = tokens
        elif layout == "dict_mask":
            x = {"tokens": tokens, "mask": np.ones(size, bool)}
        else:
            x = {"a": tokens, "b": rng.integers(1, 100, size_b).astype(np.int32)}
        # y is the example's index, so every row can be traced back to its example.
        if labels == "none":
            elements.append(x)
        elif labels == "y":
            elements.append((x, np.float32(i)))
        else:
            elements.append((x, np.float32(i), np.float32(i + 1)))
    lengths = draw(st.lists(st.integers(1, 80), min_size=1, max_size=4, unique=True))
    lengths_b = draw(st.lists(st.integers(1, 80), min_size=1, max_size=4, unique=True))
    batch_size = draw(st.integers(1, 8))
    remainder = draw(st.sampled_from(["drop", "pad", None]))
    return Case(layout, labels, elements, sorted(lengths), sorted(lengths_b), batch_size, remainder)


def x_of(element):
    return element[0] if isinstance(element, tuple) else element


def parts(batch):
    return list(batch) if isinstance(batch, (tuple, list)) else [batch]


def leaf(x, name):
    return x if name is None else x[name]


def varying(case):
    """(key in x or None, lengths) of each input that varies; the mask rides with the tokens."""
    if case.layout == "array":
        return [(None, case.lengths)]
    if case.layout == "dict_mask":
        return [("tokens", case.lengths), ("mask", case.lengths)]
    return [("a", case.lengths), ("b", case.lengths_b)]


def path(name):
    return "x" if name is None else f"x/{name}"


def pad_fix(case):
    targets = [{"path": path(name), "axis": 1, "lengths": list(lengths)} for name, lengths in varying(case)]
    # Another replica's view of a leaf: must be ignored.
    targets.append({"path": path(varying(case)[0][0]) + "@1", "axis": 1, "lengths": [1]})
    return {
        "kind": "pad_to_lengths",
        "targets": targets,
        "batch_size": case.batch_size,
        "remainder": case.remainder,
        "path": targets[0]["path"],
        "axis": 1,
        "lengths": case.lengths,
        "padding_overhead": 0.1,
        "compiles": 3,
        "drop_remainder": True,
        "code": "ds = ds.map(...)",
    }


def bucket_fix(case):
    if case.layout == "dict_mask":
        targets = [{"path": "x/tokens", "axis": 1}, {"path": "x/mask", "axis": 1}]
    else:  # two_inputs: "x/b" is not a target, padded to its batch's longest only
        targets = [{"path": path(varying(case)[0][0]), "axis": 1}]
    return {
        "kind": "bucket_by_length",
        "length_of": dict(targets[0]),
        "lengths": list(case.lengths),
        "targets": targets,
        "batch_size": case.batch_size,
        "remainder": case.remainder,
    }


def padded_batches(elements, batch_size):
    """What a user's padded_batch(batch_size) gives, in numpy: each leaf padded to its batch's longest."""
    out = []
    for start in range(0, len(elements), batch_size):
        group = elements[start : start + batch_size]

        def stack(*leaves):
            if np.ndim(leaves[0]) == 0:
                return np.array(leaves)
            longest = max(len(a) for a in leaves)
            return np.stack([np.pad(a, (0, longest - len(a))) for a in leaves])

        firsts = [x_of(e) for e in group]
        if isinstance(firsts[0], dict):
            x = {k: stack(*[f[k] for f in firsts]) for k in firsts[0]}
        else:
            x = stack(*firsts)
        if isinstance(group[0], tuple):
            out.append((x,) + tuple(stack(*[e[i] for e in group]) for i in range(1, len(group[0]))))
        else:
            out.append(x)
    return out


def tf_elements(case):
    tf = pytest.importorskip("tensorflow")
    seq = tf.TensorSpec([None], tf.int32)
    if case.layout == "array":
        x_spec = seq
    elif case.layout == "dict_mask":
        x_spec = {"tokens": seq, "mask": tf.TensorSpec([None], tf.bool)}
    else:
        x_spec = {"a": seq, "b": seq}
    scalar = tf.TensorSpec([], tf.float32)
    spec = {"none": x_spec, "y": (x_spec, scalar), "y_sw": (x_spec, scalar, scalar)}[case.labels]
    elements = case.elements
    return tf.data.Dataset.from_generator(lambda: iter(elements), output_signature=spec)


def collect(out):
    if hasattr(out, "as_numpy_iterator"):
        return list(out.as_numpy_iterator())
    assert type(out).__mro__[1].__name__ == "PyDataset"
    return [out[i] for i in range(len(out))]


# ------------------------------------------------------------------ checks


def check_row(case, x_out, k, element):
    """Row k of a batch holds this example whole: every token in order, zeros after."""
    x = x_of(element)
    for name, _ in varying(case):
        original = leaf(x, name)
        row = leaf(x_out, name)[k]
        np.testing.assert_array_equal(row[: len(original)], original)
        assert not row[len(original) :].any()


def check_rows_padding(case, batch, real):
    """Rows beyond the real ones copy the last real row (a masked model's output stays finite)
    and weigh nothing."""
    p = parts(batch)
    for name, _ in varying(case):
        rows = leaf(p[0], name)
        assert (rows[real:] == rows[real - 1]).all()
    if case.labels != "none":
        assert (p[1][real:] == p[1][real - 1]).all()
    if case.labels == "y_sw" or (case.labels == "y" and case.remainder == "pad"):
        weights = p[2]
        assert weights.dtype == np.float32 and weights.shape == (len(p[1]),)
        assert not weights[real:].any()


def check_weights(case, batch, group):
    p = parts(batch)
    expected_parts = {"none": 1, "y": 2, "y_sw": 3}[case.labels]
    if case.labels == "y" and case.remainder == "pad":
        expected_parts = 3  # every batch gets the weights, so all keep one structure
    assert len(p) == expected_parts
    if case.labels != "none":
        np.testing.assert_array_equal(p[1][: len(group)], [e[1] for e in group])
    if case.labels == "y_sw":
        np.testing.assert_array_equal(p[2][: len(group)], [e[2] for e in group])
    elif len(p) == 3:
        np.testing.assert_array_equal(p[2], [1.0] * len(group) + [0.0] * (len(p[2]) - len(group)))


def check_padded(case, out):
    batches = collect(out)
    n, bs = len(case.elements), case.batch_size
    kept = n - n % bs if case.remainder == "drop" else n
    groups = [case.elements[i : i + bs] for i in range(0, kept, bs)]
    assert len(batches) == len(groups)
    assert sum(len(g) for g in groups) == kept  # "drop" loses exactly n mod batch_size
    for batch, group in zip(batches, groups):
        x_out = parts(batch)[0]
        rows = len(leaf(x_out, varying(case)[0][0]))
        assert rows == (bs if case.remainder in ("drop", "pad") else len(group))
        for name, lengths in varying(case):
            longest = max(len(leaf(x_of(e), name)) for e in group)
            assert leaf(x_out, name).shape == (rows, advised(longest, lengths))
        if case.layout == "dict_mask":
            assert x_out["mask"].dtype == bool
        for k, element in enumerate(group):
            check_row(case, x_out, k, element)
        check_rows_padding(case, batch, len(group))
        check_weights(case, batch, group)


def content(case, x):
    return tuple(tuple(np.asarray(leaf(x, name)).tolist()) for name, _ in varying(case))


def row_content(case, x_out, k):
    return tuple(tuple(row[row != 0].tolist()) for row in (leaf(x_out, name)[k] for name, _ in varying(case)))


def check_bucketed(case, out):
    batches = collect(out)
    name = varying(case)[0][0]
    bs = case.batch_size

    def bucket(element):
        return advised(len(leaf(x_of(element), name)), case.lengths)

    by_bucket = collections.defaultdict(list)
    for element in case.elements:
        by_bucket[bucket(element)].append(element)
    seen = collections.defaultdict(list)
    for batch in batches:
        x_out = parts(batch)[0]
        tokens = leaf(x_out, name)
        rows = len(tokens)
        assert rows == bs if case.remainder in ("drop", "pad") else 1 <= rows <= bs
        # Real rows first; padded rows (copies of the last real one) after: as many as the bucket
        # still owes when the batch is its last, partial one.
        real = min(rows, len(by_bucket.get(tokens.shape[1], ())) - len(seen[tokens.shape[1]]))
        assert real >= 1
        if case.labels == "none":  # no index: find the example by its content (equal ones are alike)
            group = [
                next(e for e in case.elements if content(case, x_of(e)) == row_content(case, x_out, k))
                for k in range(real)
            ]
        else:
            group = [case.elements[int(i)] for i in parts(batch)[1][:real]]
        length = {bucket(e) for e in group}
        assert len(length) == 1, "a batch mixes buckets"
        length = length.pop()
        seen[length] += group
        assert tokens.shape[1] == length
        if case.layout == "dict_mask":
            assert x_out["mask"].shape == tokens.shape and x_out["mask"].dtype == bool
        if case.layout == "two_inputs":  # not a target: its batch's longest, like padded_batch
            assert x_out["b"].shape[1] == max(len(e[0]["b"] if isinstance(e, tuple) else e["b"]) for e in group)
        for k, element in enumerate(group):
            check_row(case, x_out, k, element)
        check_rows_padding(case, batch, real)
        check_weights(case, batch, group)
    assert set(seen) <= set(by_bucket)
    dropped = 0
    for length, members in by_bucket.items():
        keep = len(members) - len(members) % bs if case.remainder == "drop" else len(members)
        dropped += len(members) - keep
        if case.labels == "none":  # no index to follow: the same examples, whatever order
            assert sorted(content(case, x_of(e)) for e in seen[length]) == sorted(
                content(case, x_of(e)) for e in members[:keep]
            )
        else:  # in order within a bucket, each bucket's final partial batch dropped or kept
            assert [e[1] for e in seen[length]] == [e[1] for e in members[:keep]]
    assert sum(len(v) for v in seen.values()) == len(case.elements) - dropped


# ------------------------------------------------------------------ properties


@FAST
@given(cases(), st.sampled_from(["list", "generator", "pydataset"]))
def test_apply_pad_fix_numpy(case, source):
    batches = padded_batches(case.elements, case.batch_size)
    if source == "generator":
        data = iter(batches)
    elif source == "pydataset":
        data = batches_class()(batches, len(batches), lambda b, i: b)
    else:
        data = batches
    check_padded(case, xd.apply_fix(data, pad_fix(case)))


@FAST_TF
@given(cases())
def test_apply_pad_fix_tf_data(case):
    ds = tf_elements(case).padded_batch(case.batch_size)
    out = xd.apply_fix(ds, pad_fix(case))
    check_padded(case, out)


@FAST
@given(cases(max_examples=40))
def test_bucket_by_length_numpy(case):
    check_bucketed(case, xd.bucket_by_length(case.elements, bucket_fix(case)))


@FAST_TF
@given(cases(max_examples=40))
def test_bucket_by_length_tf_data(case):
    check_bucketed(case, xd.bucket_by_length(tf_elements(case), bucket_fix(case)))


@st.composite
def rebatch_cases(draw):
    sizes = draw(st.lists(st.integers(1, 9), min_size=1, max_size=8))
    return sizes, draw(st.integers(1, 8)), draw(st.sampled_from(["drop", "pad", None])), draw(st.booleans())


def check_rebatched(out, sizes, size, remainder, with_y):
    n = sum(sizes)
    kept = n - n % size if remainder == "drop" else n
    batches = collect(out)
    xs = [parts(b)[0] for b in batches]
    for x in xs[:-1]:
        assert len(x) == size
    if xs:
        assert len(xs[-1]) == size if remainder in ("drop", "pad") else 1 <= len(xs[-1]) <= size
    rows = np.concatenate(xs) if xs else np.zeros((0, 3))
    np.testing.assert_array_equal(rows[:kept, 0], np.arange(kept))
    assert not kept or (rows[kept:] == rows[kept - 1]).all()  # padded rows copy the last real one
    if with_y and remainder == "pad":
        weights = np.concatenate([b[2] for b in batches])
        np.testing.assert_array_equal(weights, [1.0] * kept + [0.0] * (len(weights) - kept))


def variable_batches(sizes, with_y):
    out, start = [], 0
    for s in sizes:
        x = np.stack([np.arange(start, start + s), np.ones(s), np.ones(s)], axis=1).astype(np.float32)
        out.append((x, x[:, 0].copy()) if with_y else x)
        start += s
    return out


@FAST
@given(rebatch_cases())
def test_fixed_batch_size_numpy(case):
    sizes, size, remainder, with_y = case
    fix = {"kind": "fixed_batch_size", "size": size, "batch_size": size, "remainder": remainder, "path": "x"}
    check_rebatched(xd.apply_fix(variable_batches(sizes, with_y), fix), sizes, size, remainder, with_y)


@FAST_TF
@given(rebatch_cases())
def test_fixed_batch_size_tf_data(case):
    tf = pytest.importorskip("tensorflow")
    sizes, size, remainder, with_y = case
    batches = variable_batches(sizes, with_y)
    x_spec = tf.TensorSpec([None, 3], tf.float32)
    spec = (x_spec, tf.TensorSpec([None], tf.float32)) if with_y else x_spec
    ds = tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=spec)
    fix = {"kind": "fixed_batch_size", "size": size, "batch_size": size, "remainder": remainder, "path": "x"}
    check_rebatched(xd.apply_fix(ds, fix), sizes, size, remainder, with_y)


@st.composite
def size_cases(draw):
    """Batches of square images (height = width) from a few sizes, each row's id in its pixels and in y."""
    batches = draw(st.lists(st.tuples(st.sampled_from([3, 4, 6]), st.integers(1, 9)), min_size=1, max_size=10))
    return batches, draw(st.integers(1, 8)), draw(st.sampled_from(["drop", "pad", None]))


def image_batches(shapes):
    out, start = [], 0
    for size, rows in shapes:
        ids = np.arange(start, start + rows, dtype=np.float32)
        out.append((np.ones((rows, size, size, 2), np.float32) * ids[:, None, None, None], ids))
        start += rows
    return out


def size_fix(batch_size, remainder):
    targets = [{"path": "x", "axis": 1}, {"path": "x", "axis": 2}]
    return {"kind": "bucket_by_size", "targets": targets, "batch_size": batch_size, "remainder": remainder}


def check_by_size(out, shapes, batch_size, remainder):
    """Each batch holds rows of one size, whole; per size, the rows in order, its last partial batch
    dropped, padded (rows that weigh nothing, copies of its last row) or kept as it is."""
    by_size = collections.defaultdict(list)
    start = 0
    for size, rows in shapes:
        by_size[size] += list(range(start, start + rows))
        start += rows
    seen = collections.defaultdict(list)
    batches = collect(out)
    for batch in batches:
        x, ids = parts(batch)[:2]
        size = x.shape[1]
        assert x.shape[2] == size and len(x) == len(ids)
        np.testing.assert_array_equal(x, np.ones_like(x) * ids[:, None, None, None])  # rows whole
        real = len(ids)
        if remainder == "pad":
            weights = parts(batch)[2]
            real = int(weights.sum())
            np.testing.assert_array_equal(weights, [1.0] * real + [0.0] * (len(ids) - real))
            assert len(ids) == batch_size and (ids[real:] == ids[real - 1]).all()
        else:
            assert len(batch) == 2
            assert len(ids) == batch_size or (remainder is None and len(ids) < batch_size)
        seen[size] += ids[:real].astype(int).tolist()
    for size, rows in by_size.items():
        keep = len(rows) - len(rows) % batch_size if remainder == "drop" else len(rows)
        assert seen[size] == rows[:keep]
    assert set(seen) <= set(by_size)


@FAST
@given(size_cases(), st.sampled_from(["list", "generator"]))
def test_bucket_by_size_numpy(case, source):
    shapes, batch_size, remainder = case
    batches = image_batches(shapes)
    out = xd.apply_fix(iter(batches) if source == "generator" else batches, size_fix(batch_size, remainder))
    check_by_size(out, shapes, batch_size, remainder)


@FAST_TF
@given(size_cases())
def test_bucket_by_size_tf_data(case):
    tf = pytest.importorskip("tensorflow")
    shapes, batch_size, remainder = case
    batches = image_batches(shapes)
    spec = (tf.TensorSpec([None, None, None, 2], tf.float32), tf.TensorSpec([None], tf.float32))
    ds = tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=spec)
    check_by_size(xd.apply_fix(ds, size_fix(batch_size, remainder)), shapes, batch_size, remainder)


def test_the_fixes_applied_are_recorded_with_the_lengths_their_targets_take():
    from xla_keras.data import applied

    applied.forget()
    fix = {"kind": "pad_to_lengths", "targets": [{"path": "x", "axis": 1, "lengths": [8, 4]}], "batch_size": None}
    xd.apply_fix(remainder_batches(), fix)
    # The advised lengths only: data longer than all of them is padded to doubled lengths, not these.
    assert applied.applied() == (("pad_to_lengths", (("x", 1, (4, 8)),)),)
    sizes = dict(size_fix(4, "drop"), sizes=[[3, 3], [6, 6]])
    xd.apply_fix(image_batches([(3, 4), (6, 4)]), sizes)
    xd.apply_fix(remainder_batches(), fix)  # again: once, the latest last
    assert [entry.kind for entry in applied.applied()] == ["bucket_by_size", "pad_to_lengths"]
    assert applied.applied()[0].targets == (("x", 1, (3, 6)), ("x", 2, (3, 6)))
    xd.apply_fix(image_batches([(3, 4)]), size_fix(4, "drop"))  # no sizes in the fix: nothing to recognise
    with pytest.raises(ValueError):
        xd.apply_fix(remainder_batches(), {"kind": "drop_remainder", "rows": 5})
    assert len(applied.applied()) == 2
    for n in range(applied.MAX_KEPT + 3):
        applied.record("pad_to_lengths", [("x", 1, (n + 1,))])
    kept = applied.applied()
    assert len(kept) == applied.MAX_KEPT and kept[-1].targets[0][2] == (applied.MAX_KEPT + 3,)
    applied.forget()
    assert applied.applied() == ()


# ------------------------------------------------------------------ examples


def remainder_batches():
    x = np.arange(21 * 2, dtype=np.float32).reshape(21, 2) + 1
    return [(x[i : i + 8], x[i : i + 8, 0]) for i in range(0, 21, 8)]  # 8, 8, 5 rows


@pytest.mark.parametrize("kind", ["drop_remainder", "pad_remainder"])
def test_remainder_kinds(kind):
    fix = {"kind": kind, "rows": 5, "batch_size": 8}  # no "remainder": the kind says which
    out = collect(xd.apply_fix(remainder_batches(), fix))
    if kind == "drop_remainder":
        assert [len(b[0]) for b in out] == [8, 8] and all(len(b) == 2 for b in out)
    else:
        assert [len(b[0]) for b in out] == [8, 8, 8]
        np.testing.assert_array_equal(out[2][2], [1] * 5 + [0] * 3)
        assert (out[2][0][5:] == out[2][0][4]).all() and (out[2][1][5:] == out[2][1][4]).all()


def test_remainder_kinds_tf_data():
    tf = pytest.importorskip("tensorflow")
    x = np.arange(21 * 2, dtype=np.float32).reshape(21, 2) + 1
    ds = tf.data.Dataset.from_tensor_slices(x).batch(8)  # x only: predict
    out = collect(xd.apply_fix(ds, {"kind": "pad_remainder", "rows": 5, "batch_size": 8, "remainder": "pad"}))
    assert [b.shape for b in out] == [(8, 2)] * 3
    np.testing.assert_array_equal(np.concatenate(out)[:21], x)  # predictions[:21] are the real ones
    out = collect(xd.apply_fix(ds, {"kind": "drop_remainder", "rows": 5, "batch_size": 8, "remainder": "drop"}))
    assert [b.shape for b in out] == [(8, 2)] * 2


def test_remainder_none_leaves_rows():
    fix = {
        "kind": "pad_to_lengths",
        "targets": [{"path": "x", "axis": 1, "lengths": [4]}],
        "batch_size": None,
        "remainder": "drop",
    }  # no batch size: nothing to hold rows to
    out = collect(xd.apply_fix(remainder_batches(), fix))
    assert [b[0].shape for b in out] == [(8, 4), (8, 4), (5, 4)]


def test_sequence_with_short_middle_batch_drop_is_refused():
    batches = [(np.ones((8, 2)), np.ones(8)), (np.ones((3, 2)), np.ones(3)), (np.ones((8, 2)), np.ones(8))]
    fix = {"kind": "drop_remainder", "batch_size": 8, "remainder": "drop"}
    out = xd.apply_fix(batches, fix)  # lazy: only the last batch was read
    with pytest.raises(ValueError, match="Batch 1 has 3 rows.*not the last"):
        out[1]
    assert len(collect(xd.apply_fix(iter(batches), fix))) == 2  # a generator: read whole, every short one dropped


def test_pre_padded_elements_are_not_cut():
    elements = [(np.pad(np.arange(1, n + 1), (0, 30 - n)), np.float32(n)) for n in (3, 4, 20, 5)]
    fix = {
        "kind": "pad_to_lengths",
        "targets": [],
        "batch_size": 2,
        "remainder": "pad",
        "bucket_by_length": {
            "kind": "bucket_by_length",
            "length_of": {"path": "x", "axis": 1},
            "lengths": [8, 16],
            "targets": [{"path": "x", "axis": 1}],
        },
    }
    out = collect(xd.bucket_by_length(elements, fix))  # batch size and remainder from the outer fix
    # Buckets 8 (3, 4 | 5) and 32 (20, beyond 16): never cut below the elements' 30.
    assert sorted(b[0].shape for b in out) == [(2, 30), (2, 30), (2, 32)]
    assert sorted(float(v) for b in out for v, w in zip(b[1], b[2]) if w) == [3, 4, 5, 20]
    out = collect(xd.bucket_by_length(elements, fix, batch_size=4))
    assert sorted(b[0].shape for b in out) == [(4, 30), (4, 32)]


def test_pre_padded_elements_are_not_cut_tf_data():
    tf = pytest.importorskip("tensorflow")
    x = np.stack([np.pad(np.arange(1, n + 1), (0, 30 - n)) for n in (3, 4, 20, 5)])
    ds = tf.data.Dataset.from_tensor_slices((x, np.arange(4, dtype=np.float32)))
    fix = {
        "kind": "bucket_by_length",
        "length_of": {"path": "x", "axis": 1},
        "lengths": [8, 16],
        "targets": [{"path": "x", "axis": 1}],
        "batch_size": 2,
        "remainder": "drop",
    }
    out = collect(xd.bucket_by_length(ds, fix))
    assert [b[0].shape for b in out] == [(2, 30)]  # the 8-bucket's pair; the 20 is dropped alone


def test_tf_padding_keeps_static_dims():
    tf = pytest.importorskip("tensorflow")
    ds = tf.data.Dataset.from_tensor_slices((np.ones((10, 5, 8), np.float32), np.ones(10, np.float32))).batch(4)
    fix = {
        "kind": "pad_to_lengths",
        "targets": [{"path": "x", "axis": 1, "lengths": [16]}],
        "batch_size": 4,
        "remainder": "pad",
    }
    out = xd.apply_fix(ds, fix)
    # The padded axis is unknown (or folded to 16); the others stay: Dense layers build on the 8.
    assert out.element_spec[0].shape.as_list() in ([None, None, 8], [None, 16, 8])
    assert [b[0].shape for b in collect(out)] == [(4, 16, 8)] * 3


def test_tf_one_tuple_and_namedtuple_elements_keep_their_structure():
    tf = pytest.importorskip("tensorflow")
    Pair = collections.namedtuple("Pair", "tokens mask")
    x = np.ones((5, 3), np.int32)
    # A namedtuple of 1..3 fields is split like a tuple (x, y): as Keras unpacks it.
    fix = {
        "kind": "pad_to_lengths",
        "targets": [{"path": "x", "axis": 1, "lengths": [4]}, {"path": "y", "axis": 1, "lengths": [4]}],
    }
    out = xd.apply_fix(tf.data.Dataset.from_tensor_slices(Pair(x, x)).batch(2), fix)
    assert type(out.element_spec).__name__ == "Pair"
    assert [(b.tokens.shape, b.mask.shape) for b in collect(out)] == [((2, 4), (2, 4))] * 2 + [((1, 4), (1, 4))]
    fix = {"kind": "pad_to_lengths", "targets": [{"path": "x/tokens", "axis": 1, "lengths": [4]}]}
    out = xd.apply_fix(tf.data.Dataset.from_tensor_slices((Pair(x, x),)).batch(2), fix)
    assert isinstance(out.element_spec, tuple) and len(out.element_spec) == 1
    assert [(b[0].tokens.shape, b[0].mask.shape) for b in collect(out)] == [((2, 4), (2, 3))] * 2 + [((1, 4), (1, 3))]


@pytest.mark.parametrize(
    "batch",
    [
        np.zeros((2, 3)),
        (np.zeros((2, 3)),),
        ({"b": np.zeros(2), "a": {"z": np.zeros(2), "k": [np.zeros(2), np.zeros(2)]}}, np.zeros(2)),
        (np.zeros(2), np.zeros(2), np.zeros(2)),
        (np.zeros(2),) * 4,
        [np.zeros(2), {"m": np.zeros(2)}],
        collections.namedtuple("P", "tokens mask")(np.zeros(2), np.zeros(2)),
        {"x": (np.zeros(2), collections.namedtuple("Q", "u")(np.zeros(2)))},
    ],
)
def test_paths_match_the_monitors_signatures(batch):
    assert [p for p, _ in leaves(batch)] == [leaf.path for leaf in signature_of(batch)]


def test_pydataset_output_pickles_and_keeps_workers():
    class Source(keras.utils.PyDataset):
        def __init__(self):
            super().__init__(workers=2, max_queue_size=3)

        def __len__(self):
            return 2

        def __getitem__(self, i):
            return np.ones((4, 3 + i), np.int32), np.ones(4, np.float32)

    fix = {
        "kind": "pad_to_lengths",
        "targets": [{"path": "x", "axis": 1, "lengths": [8]}],
        "batch_size": 4,
        "remainder": "pad",
    }
    out = xd.apply_fix(Source(), fix)
    assert (out.workers, out.max_queue_size) == (2, 3)
    assert [b[0].shape for b in collect(out)] == [(4, 8)] * 2
    # A multiprocessing PyDataset is pickled to its workers.
    copy = pickle.loads(pickle.dumps(xd.apply_fix(remainder_batches(), dict(fix, batch_size=8))))
    assert [b[0].shape for b in collect(copy)] == [(8, 8)] * 3


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    "fix, message",
    [
        (
            {"kind": "consistent_structure"},
            r"cannot be applied mechanically.*same structure and dtypes.*cast.*"
            r"'pad_to_lengths', 'fixed_batch_size', 'drop_remainder', 'pad_remainder'",
        ),
        ({"kind": "unknown"}, r"'unknown' cannot be applied mechanically.*apply_fix accepts the kinds"),
        ({"kind": "reshuffle"}, r"kind 'reshuffle' cannot be applied mechanically.*apply_fix accepts the kinds"),
        (
            {"kind": "bucket_by_length", "length_of": {"path": "x", "axis": 1}, "lengths": [4], "targets": []},
            r"xla_keras\.data\.bucket_by_length\(unbatched, fix, batch_size\)",
        ),
        ([("kind", "pad_to_lengths")], r"A fix is a dict.*got list"),
        ({"targets": []}, r"no 'kind' key"),
        ({"kind": "pad_to_lengths", "lengths": [4]}, r"pad_to_lengths fix has no 'targets' key"),
        ({"kind": "pad_to_lengths", "targets": [{"path": "x", "axis": 1}]}, r"target 0 has no 'lengths' key"),
        ({"kind": "pad_to_lengths", "targets": [{"path": "x", "lengths": [4]}]}, r"target 0 has no 'axis' key"),
        ({"kind": "pad_to_lengths", "targets": [{"path": "x", "axis": 1, "lengths": []}]}, r"non-empty list"),
        (
            {
                "kind": "pad_to_lengths",
                "targets": [{"path": "x", "axis": 1, "lengths": [4]}],
                "batch_size": 8,
                "remainder": "trim",
            },
            r"'remainder' must be 'drop', 'pad' or None",
        ),
        ({"kind": "fixed_batch_size", "batch_size": 32}, r"fixed_batch_size fix has no 'size' key"),
        ({"kind": "drop_remainder", "rows": 5}, r"drop_remainder fix has no 'batch_size' key"),
        (
            {"kind": "pad_to_lengths", "targets": [{"path": "x/tokens", "axis": 1, "lengths": [4]}]},
            r"None of the fix's inputs \('x/tokens'\) is in the data \(its inputs: 'x', 'y'\)",
        ),
        ({"kind": "pad_to_lengths", "targets": [{"path": "x", "axis": 2, "lengths": [4]}]}, r"has no axis 2"),
        ({"kind": "bucket_by_size", "targets": [{"path": "x", "axis": 1}]}, r"bucket_by_size fix has no 'batch_size'"),
        ({"kind": "bucket_by_size", "targets": [], "batch_size": 8}, r"'targets' name no axis to group rows by"),
        (
            {"kind": "bucket_by_size", "targets": [{"path": "x", "axis": a} for a in (1, 2, 3, 4)], "batch_size": 8},
            r"at most 3 axes; got 4",
        ),
        (
            {"kind": "bucket_by_size", "targets": [{"path": "x", "axis": 1}], "batch_size": 8, "sizes": [[3, 4]]},
            r"'sizes' must be a list of sizes, one per target",
        ),
        ({"kind": "bucket_by_size", "targets": [{"path": "x", "axis": 0}], "batch_size": 8}, r"int >= 1; got 0"),
    ],
)
def test_apply_fix_errors(fix, message):
    with pytest.raises(ValueError, match=message):
        xd.apply_fix(remainder_batches(), fix)


def test_bucket_errors():
    elements = [(np.ones(3), np.float32(0))]
    bucket = {
        "kind": "bucket_by_length",
        "length_of": {"path": "x", "axis": 1},
        "lengths": [4],
        "targets": [{"path": "x", "axis": 1}],
    }
    with pytest.raises(ValueError, match="needs a batch size"):
        xd.bucket_by_length(elements, bucket)
    with pytest.raises(ValueError, match="has no 'bucket_by_length' part.*apply_fix"):
        xd.bucket_by_length(elements, {"kind": "pad_to_lengths", "targets": []}, 2)
    with pytest.raises(ValueError, match="bucket_by_length fix has no 'length_of' key"):
        xd.bucket_by_length(elements, {"kind": "bucket_by_length", "lengths": [4], "targets": []}, 2)
    with pytest.raises(ValueError, match="bucket_by_length fix has no 'targets' key"):
        xd.bucket_by_length(elements, {k: v for k, v in bucket.items() if k != "targets"}, 2)
    with pytest.raises(ValueError, match="takes a 'bucket_by_length' fix.*got kind 'fixed_batch_size'"):
        xd.bucket_by_length(elements, {"kind": "fixed_batch_size", "size": 2}, 2)
    with pytest.raises(ValueError, match="no input 'x/tokens'"):
        xd.bucket_by_length(elements, dict(bucket, length_of={"path": "x/tokens", "axis": 1}), 2)
    with pytest.raises(ValueError, match=r"single examples.*list\(zip\(x, y\)\)"):
        xd.bucket_by_length((np.ones((4, 3)), np.ones(4)), bucket, 2)


def test_whole_arrays_are_refused():
    fix = {"kind": "drop_remainder", "batch_size": 8, "remainder": "drop"}
    with pytest.raises(ValueError, match=r"batches the model is fed.*x\[i:i \+ n\]"):
        xd.apply_fix((np.ones((20, 3)), np.ones(20)), fix)
    with pytest.raises(ValueError, match="got a ndarray"):
        xd.apply_fix(np.ones((20, 3)), fix)


# ------------------------------------------------------------------ no TensorFlow


NO_TF_SCRIPT = textwrap.dedent("""
    import sys
    sys.modules["tensorflow"] = None  # any import of TensorFlow now fails
    import numpy as np
    import xla_keras.data as xd

    rng = np.random.default_rng(0)
    examples = [(rng.integers(1, 100, n).astype("int32"), np.float32(n % 2)) for n in rng.integers(1, 40, 37)]
    batches = [(np.stack([np.pad(t, (0, m - len(t))) for t, _ in group]), np.array([y for _, y in group]))
               for group in (examples[i:i + 8] for i in range(0, 37, 8))
               for m in [max(len(t) for t, _ in group)]]
    pad = {"kind": "pad_to_lengths", "targets": [{"path": "x", "axis": 1, "lengths": [16, 32]}],
           "batch_size": 8, "remainder": "pad"}
    padded = xd.apply_fix(batches, pad)
    shapes = [padded[i][0].shape for i in range(len(padded))]
    assert {s[0] for s in shapes} == {8} and {s[1] for s in shapes} <= {16, 32, 64}, shapes
    bucket = {"kind": "bucket_by_length", "length_of": {"path": "x", "axis": 1}, "lengths": [16, 32],
              "targets": [{"path": "x", "axis": 1}], "batch_size": 8, "remainder": "drop"}
    bucketed = xd.bucket_by_length(iter(examples), bucket)
    assert all(bucketed[i][0].shape[0] == 8 for i in range(len(bucketed)))

    import keras
    assert keras.backend.backend() == "jax"
    model = keras.Sequential([keras.Input((None,), dtype="int32"), keras.layers.Embedding(100, 4),
                              keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    model.fit(padded, epochs=1, verbose=0)
    model.fit(bucketed, epochs=1, verbose=0)
    loaded = [name for name in sys.modules if name.split(".")[0] == "tensorflow"]
    assert loaded == ["tensorflow"] and sys.modules["tensorflow"] is None, loaded
    print("OK")
""")


@pytest.mark.slow
def test_numpy_path_needs_no_tensorflow():
    pytest.importorskip("jax")
    env = dict(
        os.environ,
        KERAS_BACKEND="jax",
        JAX_PLATFORMS="cpu",
        PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    result = subprocess.run(
        [sys.executable, "-c", NO_TF_SCRIPT], env=env, cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0 and result.stdout.strip().endswith("OK"), result.stderr[-3000:]


def test_bucket_by_length_refuses_batched_data_when_the_fix_knows_the_rank():
    fix = {
        "kind": "bucket_by_length",
        "length_of": {"path": "x", "axis": 1, "rank": 2},
        "lengths": [8, 16],
        "targets": [{"path": "x", "axis": 1}],
        "batch_size": 2,
        "remainder": "drop",
    }
    batched = [(np.ones((2, 5), np.int32), np.ones((2,), np.float32))]
    with pytest.raises(ValueError, match="takes single examples: input 'x' has 2 axes here.*before you batch"):
        xd.bucket_by_length(batched, fix)
    examples = [(np.ones((n,), np.int32), np.float32(1)) for n in (3, 5, 9, 12)]
    assert len(xd.bucket_by_length(examples, fix)) == 2
    tf = pytest.importorskip("tensorflow")
    ds = tf.data.Dataset.from_generator(
        lambda: iter(examples), output_signature=(tf.TensorSpec((None,), tf.int32), tf.TensorSpec((), tf.float32))
    )
    with pytest.raises(ValueError, match="takes single examples"):
        xd.bucket_by_length(ds.padded_batch(2), fix)
    assert len(list(xd.bucket_by_length(ds, fix))) == 2
