"""Real lengths: the bounded batch sample, what it refuses to hold, and the advice's real-padding
figures checked against exact token counts computed here. Pure: numpy only."""

import collections

import numpy as np
import pytest

from xla_keras.core.signatures import signature_of
from xla_keras.session.storm_analysis import analyse
from xla_keras.storms.buckets import best_buckets, pad_target
from xla_keras.storms.detection import ShapeHistory
from xla_keras.storms.lengths import BatchSample, SampleView, bucket_epoch, countable_leaves, real_lengths


def padded(rng, rows, low, high):
    """A batch of ``rows`` sequences padded (0) to its longest, and the real lengths."""
    lengths = rng.integers(low, high, size=rows)
    x = np.zeros((rows, lengths.max()), np.int32)
    for i, n in enumerate(lengths):
        x[i, :n] = rng.integers(1, 99, size=n)
    return x, lengths


def feed(batches, sample=None):
    history, sample = ShapeHistory(), sample or BatchSample()
    for batch in batches:
        history.observe(signature_of(batch))
        sample.offer([batch])
    history.end_of_run()
    return history, SampleView(tuple(sample.kept), sample.seen, 1, sample.reason_unsampled())


# ------------------------------------------------------------------ the sample


def test_the_reservoir_is_uniform_and_bounded():
    picked = collections.Counter()
    for seed in range(300):
        sample = BatchSample(capacity=10, seed=seed)
        for i in range(200):
            sample.offer([(np.full((2, 3), i + 1, np.int32), np.zeros(2))])
        assert len(sample.kept) == 10 and sample.seen == 200
        picked.update(int(leaves["x"][0, 0]) - 1 for leaves in sample.kept)
    quarters = [sum(picked[i] for i in range(q * 50, q * 50 + 50)) for q in range(4)]
    assert all(abs(q - 750) < 120 for q in quarters), quarters  # 3000 picks, 750 per quarter expected


def test_after_filling_a_batch_costs_a_compare_not_a_read():
    sample = BatchSample(capacity=4)
    looked = []
    original = sample._take
    sample._take = lambda batch: (looked.append(1), original(batch))
    for _ in range(10_000):
        sample.offer([np.ones((2, 3), np.int32)])
    assert len(sample.kept) == 4 and len(looked) < 60  # ~4 * ln(10000 / 4) picks, not 10,000 looks


def test_the_memory_bound_caps_the_reservoir():
    sample = BatchSample(capacity=100, max_bytes=10 * 4 * 64 * 4)  # ten int32 batches of 4 x 64
    for _ in range(300):
        sample.offer([np.ones((4, 64), np.int32)])
    assert len(sample.kept) == 10


def test_only_host_integer_and_mask_leaves_are_kept():
    batch = (
        {
            "tokens": np.ones((2, 5), np.int64),
            "mask": np.ones((2, 5), bool),
            "features": np.ones((2, 5, 3), np.float32),
        },
        np.ones((2,), np.int32),
    )
    assert sorted(countable_leaves(batch)) == ["x/mask", "x/tokens"]  # floats and rank-1 labels left out


class DeviceTensor:
    """What a TensorFlow tensor on a GPU looks like to the sampler: reading it would sync."""

    shape, dtype, device = (2, 5), np.dtype("int32"), "/job:localhost/replica:0/task:0/device:GPU:0"

    def numpy(self):
        raise AssertionError("the sampler read a device tensor")


def test_device_batches_are_never_read_and_the_advice_says_so():
    sample = BatchSample()
    batches = [(DeviceTensor(), np.zeros(2, np.float32)) for _ in range(40)]
    for b in batches:
        sample.offer([b])
    assert sample.kept == [] and sample.on_device == BatchSample.GIVE_UP_AFTER  # then it stops looking
    history = ShapeHistory()
    for n in range(5, 14):
        history.observe((signature_of(np.zeros((2, n), np.int32))))
    history.end_of_run()
    view = SampleView((), sample.seen, 1, sample.reason_unsampled())
    _, advice, fix = analyse("train", history, 8, view=view)
    assert fix["real_lengths"] == {"measured": False, "reason": sample.reason_unsampled()}
    assert "Real lengths not measured: the batches were on a device" in advice


def test_jax_arrays_count_as_device_buffers():
    jnp = pytest.importorskip("jax.numpy")
    sample = BatchSample()
    sample.offer([jnp.ones((2, 5), "int32")])
    assert sample.kept == [] and sample.on_device == 1


@pytest.mark.parametrize(
    "array, axis, expect",
    [
        (np.array([[3, 4, 0, 0], [5, 0, 0, 0]]), 1, [2, 1]),
        (np.array([[0, 0, 3, 4], [0, 0, 0, 5]]), 1, [2, 1]),  # pre-padded (keras.utils.pad_sequences' default)
        (np.array([[True, True, False], [True, False, False]]), 1, [2, 1]),  # a mask counts its ones
        (np.array([[[1, 0], [0, 0], [0, 2]], [[0, 0], [0, 0], [0, 0]]]), 1, [2, 0]),  # rank 3: any nonzero feature
        (np.array([[[1, 0], [0, 0], [0, 2]], [[0, 3], [0, 0], [0, 0]]]), 2, [2, 1]),
    ],
)
def test_real_length_counts_nonzero_positions(array, axis, expect):
    assert real_lengths(array, axis).tolist() == expect


# ------------------------------------------------------------------ the figures against exact counts


def test_real_padding_figures_match_exact_token_counts():
    rng = np.random.default_rng(3)
    made = [padded(rng, 16, 5, 91) for _ in range(30)]
    batches = [(x, np.zeros(16, np.float32)) for x, _ in made]
    history, view = feed(batches)
    _, advice, fix = analyse("train", history, 8, view=view)
    real = sum(int(n.sum()) for _, n in made)  # the generator's exact token count
    fed = sum(x.size for x, _ in made)
    padded_to = sum(16 * pad_target(x.shape[1], fix["lengths"]) for x, _ in made)
    assert fix["real_lengths"]["real_tokens"] == real and fix["real_lengths"]["sampled_batches"] == 30
    assert fix["batches_real_padding_overhead"] == pytest.approx(fed / real - 1, abs=1e-4)
    assert fix["real_padding_overhead"] == pytest.approx(padded_to / real - 1, abs=1e-4)
    bucket = fix["bucket_by_length"]
    histogram = collections.Counter(int(v) for _, n in made for v in n)
    assert bucket["lengths"] == best_buckets(dict(histogram), len(bucket["lengths"]))[0]  # the same optimiser
    bucketed = sum(pad_target(v, bucket["lengths"]) * c for v, c in histogram.items())
    assert bucket["real_padding_overhead"] == pytest.approx(bucketed / real - 1, abs=1e-4)
    assert bucket["real_padding_overhead"] <= 0.20 < fix["real_padding_overhead"]
    # Tokens per example computed: the pad fix over bucketing, whose partial batches are dropped.
    epoch = bucket_epoch(dict(histogram), bucket["lengths"], 480, 16, "drop")
    assert fix["compute_ratio"] == pytest.approx((padded_to / 480) / (epoch.tokens / epoch.kept), abs=1e-4)
    assert fix["compute_ratio"] == pytest.approx(padded_to / bucketed, rel=0.02)  # drops barely move it
    assert fix["better_fix"] == "bucket_by_length" and "Bucketing saves more compute" in advice
    assert f"padding adds {fed / real - 1:.0%} to the batches as fed" in advice
    assert bucket["dropped_per_epoch"] == round(epoch.dropped) and bucket["remainder"] == "drop"
    assert bucket["length_of"] == {"path": "x", "axis": 1, "rank": 2}


def test_a_sample_of_many_batches_estimates_the_real_padding():
    rng = np.random.default_rng(4)
    made = [padded(rng, 8, 5, 120) for _ in range(2000)]
    history, view = feed([(x, np.zeros(8, np.float32)) for x, _ in made])
    _, advice, fix = analyse("train", history, 8, view=view)
    real = sum(int(n.sum()) for _, n in made)
    fed = sum(x.size for x, _ in made)
    assert fix["real_lengths"]["sampled_batches"] == 256 and fix["real_lengths"]["batches_seen"] == 2000
    assert "a sample of 256 of 2000 batches" in advice
    assert fix["batches_real_padding_overhead"] == pytest.approx(fed / real - 1, rel=0.1)


def test_a_mask_that_varies_with_float_features_gives_their_real_length():
    rng = np.random.default_rng(5)
    batches, real = [], 0
    for _ in range(12):
        _, lengths = padded(rng, 8, 3, 40)
        mask = np.arange(lengths.max())[None, :] < lengths[:, None]
        features = rng.random((8, lengths.max(), 4), dtype=np.float32) * mask[..., None]
        batches.append(({"features": features, "mask": mask}, np.zeros(8, np.float32)))
        real += int(lengths.sum())
    history, view = feed(batches)
    _, _, fix = analyse("train", history, 8, view=view)
    assert {t["path"] for t in fix["targets"]} == {"x/features", "x/mask"}
    assert fix["real_lengths"]["path"] == "x/mask" and fix["real_lengths"]["real_tokens"] == real
    assert {t["path"] for t in fix["bucket_by_length"]["targets"]} == {"x/features", "x/mask"}


def test_padding_as_good_as_bucketing_is_said_plainly():
    # Every row as long as its batch: padding to a few lengths costs little, bucketing saves < 5%.
    batches = [(np.ones((8, n), np.int32), np.zeros(8, np.float32)) for n in range(40, 64)]
    history, view = feed(batches)
    _, advice, fix = analyse("train", history, 8, view=view)
    assert fix["better_fix"] == "pad_to_lengths" and "Padding the batches is as good" in advice


def test_validation_pads_the_remainder_of_each_bucket():
    rng = np.random.default_rng(6)
    made = [padded(rng, 16, 5, 60) for _ in range(6)] + [padded(rng, 5, 5, 60)]
    history = ShapeHistory()
    sample = BatchSample()
    for x, _ in made:
        history.observe(signature_of((x, np.zeros(len(x), np.float32))))
        sample.offer([(x, np.zeros(len(x), np.float32))])
    history.end_of_run()
    view = SampleView(tuple(sample.kept), sample.seen, 1, None)
    _, advice, fix = analyse("test", history, 8, view=view)
    assert fix["remainder"] == "pad" and fix["drop_remainder"] is False and fix["batch_size"] == 16
    bucket = fix["bucket_by_length"]
    assert bucket["remainder"] == "pad" and "dropped_per_epoch" not in bucket and bucket["padded_rows_per_epoch"] > 0
    assert "pads it to 16 rows (copies of its last row) that weigh nothing" in advice
    assert f"each bucket's last batch is padded: about {bucket['padded_rows_per_epoch']} rows per run" in advice
    # predict: no bucketing (it would reorder the outputs), and no talk of sample weights
    _, advice, fix = analyse("predict", history, 8, view=view)
    assert "bucket_by_length" not in fix and "would reorder the outputs" in advice
    assert "sample_weight" not in advice and "keep the first" in advice


@pytest.mark.parametrize(
    "histogram, bounds, per_epoch, remainder, expect",
    [
        # 100 examples: 60 short, 34 middle, 6 long; batches of 16. Dropping: the 6 long ones would never
        # fill a batch, so the last bucket absorbs the middle one (40 -> 48 + 6 = 40 in one bucket).
        ({10: 60, 30: 34, 50: 6}, [10, 30, 50], 100, "drop", ([10, 50], 16 * 3 * 10 + 32 * 50, 80, 20, 0)),
        ({10: 60, 30: 34, 50: 6}, [10, 30, 50], 100, "pad", ([10, 30, 50], 64 * 10 + 48 * 30 + 16 * 50, 100, 0, 28)),
        ({10: 16, 20: 16}, [10, 20], 32, "drop", ([10, 20], 160 + 320, 32, 0, 0)),
        ({10: 5, 20: 40}, [10, 20], 45, "drop", ([20], 32 * 20, 32, 13, 0)),  # a sparse first bucket goes up
    ],
)
def test_a_bucket_that_fills_no_batch_is_merged_when_partial_batches_are_dropped(
    histogram, bounds, per_epoch, remainder, expect
):
    epoch = bucket_epoch(histogram, bounds, per_epoch, 16, remainder)
    assert epoch.bounds == expect[0]
    assert (epoch.tokens, epoch.kept, epoch.dropped, epoch.padded_rows) == pytest.approx(expect[1:])


def test_a_sample_that_cannot_be_read_is_stated_not_raised():
    class Broken:
        shape, dtype, device = (2, 5), np.dtype("int32"), "/device:CPU:0"

        def numpy(self):
            raise RuntimeError("gone")

    history = ShapeHistory()
    for n in range(5, 14):
        history.observe(signature_of(np.zeros((2, n), np.int32)))
    view = SampleView(({"x": Broken()},), 9, 1, None)
    _, advice, fix = analyse("train", history, 8, view=view)
    assert fix["kind"] == "pad_to_lengths" and fix["real_lengths"]["measured"] is False
    assert "reading the sampled batches failed (RuntimeError: gone)" in advice
