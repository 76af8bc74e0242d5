"""Property-based tests (hypothesis): signatures, their diff and the storm advice
over random nested structures and shape streams never raise, and the advice is
consistent with the data."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xla_keras.core.signatures import Leaf, diff, fingerprint, from_jsonable, signature_of, to_jsonable
from xla_keras.session.storm_analysis import analyse
from xla_keras.storms.buckets import best_buckets, best_cost_overhead
from xla_keras.storms.detection import ShapeHistory, StormDetector, StormRule, partial_batch_signatures


class T:
    def __init__(self, shape, dtype="float32"):
        self.shape, self.dtype = tuple(shape), dtype


dims = st.one_of(st.none(), st.integers(0, 300))
tensors = st.builds(T, st.lists(dims, max_size=4), st.sampled_from(["float32", "int32", "bool"]))
keys = st.text(alphabet="abcxyz_", min_size=1, max_size=5)
nested = st.recursive(
    st.one_of(tensors, st.none()),
    lambda children: st.one_of(st.lists(children, max_size=3).map(tuple), st.dictionaries(keys, children, max_size=3)),
    max_leaves=8,
)


@given(nested)
def test_signature_of_any_structure(batch):
    sig = signature_of(batch)
    assert all(isinstance(leaf, Leaf) for leaf in sig)
    assert len({leaf.path for leaf in sig}) == len(sig)  # paths name leaves uniquely
    assert signature_of(batch) == sig and fingerprint(signature_of(batch)) == fingerprint(sig)
    assert from_jsonable(to_jsonable(sig)) == sig
    assert diff(sig, sig) == []


@given(nested, nested)
def test_diff_is_empty_exactly_when_signatures_are_equal(a, b):
    sa, sb = signature_of(a), signature_of(b)
    changes = diff(sa, sb)
    assert (changes == []) == (sa == sb) or sorted(sa) == sorted(sb)
    for change in changes:
        if change.axis is not None:
            old = next(leaf for leaf in sa if leaf.path == change.path)
            new = next(leaf for leaf in sb if leaf.path == change.path)
            assert old.shape[change.axis] == change.old and new.shape[change.axis] == change.new


stream = st.lists(st.tuples(st.integers(1, 64), st.integers(1, 300)), min_size=1, max_size=60)


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(stream, st.integers(2, 8))
def test_advice_never_raises_and_matches_the_shapes(batches, threshold):
    history = ShapeHistory()
    for rows, length in batches:
        history.observe((Leaf("x/tokens", "int32", (rows, length)), Leaf("y", "float32", (rows,))))
    history.end_of_run()
    varying, advice, fix = analyse("train", history, threshold)
    assert isinstance(advice, str) and advice
    # A partial last batch (fewer rows than usual, only ever at an epoch end) is explained apart.
    partial = partial_batch_signatures(history)
    lengths = {sig[0].shape[1] for fp, sig in history.signatures.items() if fp not in partial}
    for v in varying:
        if v["axis"] == 1:
            assert v["min"] == min(lengths) and v["max"] == max(lengths) and v["n_values"] == len(lengths)
    if fix["kind"] == "pad_to_lengths":
        assert fix["lengths"] == sorted(fix["lengths"]) and fix["lengths"][-1] >= max(lengths)
        assert 1 <= fix["compiles"] < max(threshold, 2) or fix["compiles"] == 1
        compile(fix["code"], "<fix>", "exec")


@given(st.dictionaries(st.integers(1, 5000), st.integers(1, 20), min_size=1, max_size=200), st.integers(1, 8))
@settings(deadline=None)
def test_buckets_cover_every_length_and_more_buckets_never_pad_more(lengths, k):
    bounds, overhead = best_buckets(lengths, k)
    assert 1 <= len(bounds) <= k and bounds == sorted(bounds) and bounds[-1] >= max(lengths)
    assert overhead == best_cost_overhead(lengths, bounds) >= 0
    assert best_buckets(lengths, k + 1)[1] <= overhead + 1e-12


@given(
    st.lists(st.integers(1, 500), min_size=1, max_size=100, unique=True).map(sorted),
    st.integers(2, 10),
    st.integers(1, 100),
)
def test_detector_opens_only_with_threshold_new_signatures_in_the_window(steps, threshold, window):
    detector = StormDetector(StormRule(threshold, window))
    for i, step in enumerate(steps):
        opened = detector.new_signature("train", step)
        in_window = [s for s in steps[: i + 1] if s > step - window]
        if opened is not None:
            assert len(in_window) >= threshold and opened[0] == min(threshold, len(in_window))
