"""Storm detection, causes and computed advice: pure, no TensorFlow."""

import itertools
import random

import pytest

from xla_keras.config import MonitorConfig
from xla_keras.core.signatures import Leaf, fingerprint
from xla_keras.errors import RecompilationStormError
from xla_keras.session.storm_analysis import analyse
from xla_keras.storms.buckets import EXACT_UP_TO, best_buckets, best_cost_overhead, pad_target
from xla_keras.storms.detection import (
    ShapeHistory,
    Storm,
    StormDetector,
    StormRule,
    partial_batch_note,
    partial_batch_signatures,
    storm_text,
    varying_axes,
)
from xla_keras.storms.fixes import apply_code


def tokens(batch, length, dtype="int32"):
    return (Leaf("x/tokens", dtype, (batch, length)), Leaf("y", "float32", (batch, 1)))


def history_of(sigs, ends_after=()):
    h = ShapeHistory()
    for i, sig in enumerate(sigs):
        h.observe(sig)
        if i in ends_after:
            h.end_of_run()
    return h


# ------------------------------------------------------------------ detection


@pytest.mark.parametrize(
    "threshold, window, new_at, opens_at",
    [
        (3, 10, [1, 2, 3], 3),
        (3, 10, [1, 5, 10], 10),  # 1..10 is exactly one window
        (3, 10, [1, 5, 11], None),  # step 1 fell out of (1, 11]
        (8, 200, list(range(1, 9)), 8),
        (8, 200, list(range(1, 8)), None),
        (2, 1, [4, 5], None),  # window 1 holds one step
        (2, 2, [4, 5], 5),
    ],
)
def test_storm_opens_exactly_at_the_threshold(threshold, window, new_at, opens_at):
    d = StormDetector(StormRule(threshold, window))
    opened = [s for s in new_at if d.new_signature("train", s) is not None]
    assert opened == ([opens_at] if opens_at else [])


def test_one_storm_at_a_time_and_the_next_after_falling_below():
    d = StormDetector(StormRule(3, 10))
    results = {s: d.new_signature("train", s) for s in [1, 2, 3, 4, 5]}
    assert results[3] == (3, 1) and results[4] is None and results[5] is None  # same storm
    assert d.new_signature("train", 30) is None  # window emptied: storm closed
    assert d.new_signature("train", 31) is None
    assert d.new_signature("train", 32) == (3, 30)  # a second storm


def test_phases_are_independent():
    d = StormDetector(StormRule(2, 10))
    assert d.new_signature("train", 1) is None
    assert d.new_signature("test", 1) is None
    assert d.new_signature("test", 2) == (2, 1)


@pytest.mark.parametrize(
    "kwargs",
    [{"storm_threshold": 1}, {"storm_threshold": True}, {"storm_threshold": 2.5}, {"storm_window": 0}]
    + [{"storm_window": "200"}],
)
def test_the_storm_rule_is_validated_once_by_the_config(kwargs):
    (name,) = kwargs
    with pytest.raises(ValueError, match=f"{name} must be an int >= "):
        MonitorConfig(log_dir=None, **kwargs)
    assert MonitorConfig(log_dir=None).storm_rule == StormRule(8, 200)


# ------------------------------------------------------------------ history


def test_history_is_bounded_but_counts_batches_of_known_signatures():
    h = ShapeHistory(max_signatures=3)
    for n in range(10):
        h.observe(tokens(8, n))
    h.observe(tokens(8, 0))
    assert len(h.signatures) == 3 and h.untracked == 7
    assert h.batches[fingerprint(tokens(8, 0))] == 2


def test_partial_last_batch_is_recognised_only_at_epoch_ends():
    # 3 epochs of 4 batches of 64 and a last batch of 40.
    epoch = [tokens(64, 10)] * 4 + [tokens(40, 10)]
    h = history_of(epoch * 3, ends_after={4, 9, 14})
    assert partial_batch_signatures(h) == {fingerprint(tokens(40, 10)): (40, 64)}
    note = partial_batch_note("train", h)
    assert "40 rows instead of 64" in note and "drop_remainder=True" in note
    # The same small batch in the middle of an epoch is not a partial batch.
    h = history_of([tokens(64, 10), tokens(40, 10), tokens(64, 10)], ends_after={2})
    assert partial_batch_signatures(h) == {}


# ------------------------------------------------------------------ causes


def test_covarying_axes_are_merged():
    sigs = [
        ((Leaf("x/tokens", "int32", (8, n)), Leaf("x/mask", "bool", (8, n)), Leaf("y", "f", (8,))), 1)
        for n in (5, 9, 13)
    ]
    axes = varying_axes(sigs)
    assert [(a.path, a.axis, a.also) for a in axes] == [("x/tokens", 1, ["x/mask:1"])]


def test_sequence_length_storm_gets_bucket_lengths_and_code():
    rng = random.Random(0)
    lengths = [rng.randint(5, 59) for _ in range(40)]
    h = history_of([tokens(32, n) for n in lengths])
    varying, advice, fix = analyse("train", h, threshold=8)
    assert varying == [
        {
            "path": "x/tokens",
            "axis": 1,
            "min": min(lengths),
            "max": max(lengths),
            "n_values": len(set(lengths)),
            "values": sorted(set(lengths)),
        }
    ]
    assert fix["kind"] == "pad_to_lengths" and fix["path"] == "x/tokens" and fix["axis"] == 1
    assert fix["lengths"] == sorted(fix["lengths"]) and fix["lengths"][-1] >= max(lengths)
    assert 1 <= fix["compiles"] < 8 and fix["compiles"] == len(fix["lengths"])
    assert fix["padding_overhead"] == pytest.approx(
        best_cost_overhead({n: lengths.count(n) for n in set(lengths)}, fix["lengths"]), abs=1e-4
    )
    assert fix["padding_overhead"] <= 0.20
    assert "Input 'x/tokens' axis 1 varies" in advice and str(fix["lengths"]) in advice
    assert "xla_keras.data.apply_fix(data, fix)" in advice
    assert fix["targets"] == [{"path": "x/tokens", "axis": 1, "lengths": fix["lengths"]}]
    assert fix["drop_remainder"] is True and fix["remainder"] == "drop" and fix["batch_size"] == 32
    assert "xla_keras.data.apply_fix(" in fix["code"] and "'targets': [{'path': 'x/tokens'" in fix["code"]
    compile(fix["code"], "<fix>", "exec")  # the code we hand out is valid Python
    assert "real_lengths" not in fix  # no sample given: no real-length claim


def test_variable_batch_size_gets_a_fixed_batch_size():
    sizes = [16, 17, 18, 19, 20, 21, 22, 23, 20, 20]
    h = history_of([tokens(n, 10) for n in sizes])
    varying, advice, fix = analyse("train", h, threshold=8)
    assert fix["kind"] == "fixed_batch_size" and fix["size"] == 20 and fix["remainder"] == "drop"
    assert varying[0]["axis"] == 0 and varying[0]["min"] == 16 and varying[0]["max"] == 23
    assert "batch size varies" in advice and "fixed size of 20" in advice and "drops the last partial" in advice
    _, advice, fix = analyse("test", h, threshold=8)
    assert fix["remainder"] == "pad" and "pads the last batch's rows" in advice


def test_partial_batch_alone_drops_it_in_training_and_pads_it_in_validation():
    epoch = [tokens(64, 10)] * 3 + [tokens(8, 10)]
    h = history_of(epoch * 2, ends_after={3, 7})
    _, advice, fix = analyse("train", h, threshold=8)
    assert {k: fix[k] for k in ("kind", "rows", "batch_size", "remainder")} == {
        "kind": "drop_remainder",
        "rows": 8,
        "batch_size": 64,
        "remainder": "drop",
    }
    assert "the fix drops it, so 8 examples per epoch are not trained on" in advice
    _, advice, fix = analyse("test", h, threshold=8)
    assert fix["kind"] == "pad_remainder" and fix["remainder"] == "pad"
    # 200 rows a run, 56 padded rows: unweighted metrics and Keras's loss tracker count them
    assert "pads it to 64 rows (copies of its last row) that weigh nothing" in advice
    assert "weighted_metrics=...) stay exact" in advice and "count the 56 padded rows (21.9% of a run's rows)" in advice
    _, advice, _ = analyse("predict", h, threshold=8)
    assert "predict returns 56 extra rows at the end: keep the first 200" in advice


def test_lengths_and_partial_batch_together():
    epoch = [tokens(32, n) for n in (10, 20, 30, 40, 50, 60, 70)] + [tokens(5, 33)]
    h = history_of(epoch, ends_after={7})
    varying, advice, fix = analyse("train", h, threshold=8)
    assert fix["kind"] == "pad_to_lengths"
    assert [v["axis"] for v in varying] == [1]  # the partial batch is not "a varying batch size"
    assert "5 rows instead of 32" in advice


def test_structure_changes_are_named():
    sigs = [tokens(8, 10), tokens(8, 10, dtype="int64")]
    _, advice, fix = analyse("train", history_of(sigs), threshold=8)
    assert fix == {"kind": "consistent_structure"} and "dtype" in advice


def test_two_varying_inputs_get_one_joint_fix():
    rng = random.Random(1)
    pairs = [(rng.randint(5, 60), rng.randint(3, 30)) for _ in range(50)]
    sigs = [(Leaf("x/encoder", "int32", (16, e)), Leaf("x/decoder", "int32", (16, d))) for e, d in pairs]
    _, advice, fix = analyse("train", history_of(sigs), threshold=8)
    per_input = {p["path"]: p for p in fix["per_input"]}
    assert set(per_input) == {"x/encoder", "x/decoder"}
    assert max(per_input["x/encoder"]["lengths"]) >= max(e for e, _ in pairs)
    assert max(per_input["x/decoder"]["lengths"]) >= max(d for _, d in pairs)

    # The joint compiles are the distinct padded (encoder, decoder) pairs, and stay below threshold.
    def pad(v, lengths):
        return min(b for b in lengths if b >= v)

    combos = {(pad(e, per_input["x/encoder"]["lengths"]), pad(d, per_input["x/decoder"]["lengths"])) for e, d in pairs}
    assert fix["compiles"] == len(combos) < 8
    assert "x/encoder" in advice and "x/decoder" in advice


# ------------------------------------------------------------------ buckets


def brute_force(lengths, k, multiple=8):
    def up(v):  # short lengths are exact candidates, longer ones rounded up to 8
        return v if v <= EXACT_UP_TO else -(-v // multiple) * multiple

    cands = sorted({up(v) for v in lengths})
    best = None
    for r in range(1, min(k, len(cands)) + 1):
        for combo in itertools.combinations(cands[:-1], r - 1):
            bounds = list(combo) + [cands[-1]]
            cost = best_cost_overhead(lengths, bounds)
            if best is None or cost < best - 1e-12:
                best = cost
    return best


@pytest.mark.parametrize("seed", range(12))
def test_bucket_programme_is_optimal(seed):
    rng = random.Random(seed)
    lengths = {}
    for _ in range(rng.randint(1, 30)):
        v = rng.randint(1, 120)
        lengths[v] = lengths.get(v, 0) + rng.randint(1, 5)
    k = rng.randint(1, 4)
    boundaries, overhead = best_buckets(lengths, k)
    assert len(boundaries) <= k and boundaries[-1] >= max(lengths)
    assert overhead == pytest.approx(brute_force(lengths, k), abs=1e-9)


def test_more_buckets_never_pad_more():
    lengths = {n: 1 + n % 3 for n in range(8, 257, 3)}
    overheads = [best_buckets(lengths, k)[1] for k in range(1, 7)]
    assert overheads == sorted(overheads, reverse=True)
    assert overheads[-1] < overheads[0]


@pytest.mark.parametrize(
    "fix, data, expect",
    [
        (
            {
                "kind": "pad_to_lengths",
                "targets": [{"path": "x", "axis": 1, "lengths": [16]}],
                "lengths": [16],
                "batch_size": 8,
                "remainder": "drop",
                "compiles": 1,
                "padding_overhead": 0.1,
            },
            "tf.data",
            (
                "ds",
                {
                    "kind": "pad_to_lengths",
                    "targets": [{"path": "x", "axis": 1, "lengths": [16]}],
                    "batch_size": 8,
                    "remainder": "drop",
                },
            ),
        ),
        (
            {"kind": "fixed_batch_size", "size": 20, "batch_size": 20, "remainder": "pad", "path": "x"},
            "arrays",
            ("batches", {"kind": "fixed_batch_size", "size": 20, "batch_size": 20, "remainder": "pad"}),
        ),
        (  # too long for one line of 100 columns: laid out over lines of at most 100
            {
                "kind": "pad_to_lengths",
                "targets": [{"path": "inputs/token_ids", "axis": 1, "lengths": list(range(16, 513, 16))}],
                "batch_size": 8,
                "remainder": "drop",
            },
            "tf.data",
            (
                "ds",
                {
                    "kind": "pad_to_lengths",
                    "targets": [{"path": "inputs/token_ids", "axis": 1, "lengths": list(range(16, 513, 16))}],
                    "batch_size": 8,
                    "remainder": "drop",
                },
            ),
        ),
    ],
)
def test_the_fix_code_is_one_call_with_the_fix_written_out(fix, data, expect):
    """The code is ``import xla_keras`` and one call of ``apply_fix`` on the user's data with the fix
    written out as a literal, in lines of at most 100 columns (the printed report's and the tab's box)."""
    import ast

    code = apply_code(fix, data)
    assert max(map(len, code.splitlines())) <= 100
    module = ast.parse(code)
    assert ast.unparse(module.body[0]) == "import xla_keras" and len(module.body) == 2
    (target,), call = module.body[1].targets, module.body[1].value
    assert ast.unparse(target) == expect[0] and ast.unparse(call.func) == "xla_keras.data.apply_fix"
    assert ast.unparse(call.args[0]) == expect[0] and ast.literal_eval(call.args[1]) == expect[1]


def test_pad_target_doubles_the_last_length_beyond_the_advised_ones():
    assert [pad_target(v, [16, 48]) for v in (1, 16, 17, 48, 49, 96, 97, 200)] == [16, 16, 48, 48, 96, 96, 192, 384]


# ------------------------------------------------------------------ text


def test_storm_text_and_round_trip():
    storm = Storm(
        "test",
        40,
        8,
        [],
        "Pad it.",
        {"kind": "unknown"},
        compiles=8,
        compile_seconds=4.1,
        steady_step_seconds=0.0009,
        window_start=3,
        action="raise",
    )
    text = storm_text(storm, 2)
    assert text.splitlines() == [
        # The steady step (0.9 ms) would pass 100 characters: it gives way (the report has it).
        "Recompilation storm (test): 8 new input shapes in 38 steps, 8 compiles, 4.1 s compiling",
        "Cause: no single input explains the new shapes",
        "Fix: none from the shapes alone; or XlaMonitor(jit='off') for this model",
        "More: monitor.report.storms[2].advice",
    ]
    assert Storm.from_dict(storm.to_dict()) == storm
    assert issubclass(RecompilationStormError, RuntimeError)


LENGTHS = [{"path": "x/tokens", "axis": 1, "min": 3, "max": 59, "n_values": 41}]
ROWS = [{"path": "x", "axis": 0, "min": 3, "max": 64, "n_values": 5}]


@pytest.mark.parametrize(
    "varying, kind, data, cause, fix",
    [
        (LENGTHS, "pad_to_lengths", "tf.data", "input 'x/tokens' axis 1 varies (3..59, 41 values)", "ds = "),
        (LENGTHS * 3, "pad_to_lengths", "arrays", "(3..59, 41 values) and 2 more", "batches = "),
        (ROWS, "fixed_batch_size", "tf.data", "the batch size (axis 0) of input 'x' varies (3..64", "ds = "),
        (ROWS, "fixed_batch_size", "pydataset", "the batch size (axis 0) of input 'x' varies (3..64", "data = "),
        ([], "consistent_structure", "tf.data", "change structure or dtype", "feed every batch with"),
    ],
    ids=["lengths", "three-inputs-arrays", "batch-size", "batch-size-pydataset", "structure"],
)
@pytest.mark.parametrize("log_dir", [None, "/tmp/" + "a-long-log-directory/" * 6], ids=["no-log-dir", "long-log-dir"])
@pytest.mark.parametrize(
    "then", ["", "XLA is now off for this evaluation (on_storm='fallback'). "], ids=["warn", "fallback"]
)
def test_storm_message_is_four_lines_of_at_most_100_characters(varying, kind, data, cause, fix, log_dir, then):
    big = Storm("predict", 123456, 4096, varying, "long " * 300, {"kind": kind}, 4096, 12345.6, 0.0123, 7)
    lines = storm_text(big, 12, log_dir, data, then).splitlines()
    assert len(lines) == 4 and max(len(line) for line in lines) <= 100, lines
    assert not any(line.endswith("…") for line in lines)  # composed to fit, not cut
    assert lines[0].startswith("Recompilation storm (predict): 4096 new input shapes in 123450 steps")
    assert cause in lines[1] and lines[2].startswith(f"Fix: {fix}")
    assert lines[3].startswith(f"{then}More: monitor.report.storms[12].advice")
    if fix.endswith("= "):  # the fix line is code that runs on the user's data
        name = fix.split()[0]
        assert lines[2] == f"Fix: {name} = xla_keras.data.apply_fix({name}, monitor.report.storms[12].fix)"


def test_messages_doctests():
    import doctest

    from xla_keras.core import messages
    from xla_keras.storms import detection

    for module in (messages, detection):
        for test in doctest.DocTestFinder().find(module):
            if test.name == "xla_keras.storms.detection.Storm":
                continue  # a fit's example: tests/test_docstrings.py runs it
            assert doctest.DocTestRunner().run(test).failed == 0, test.name


def test_train_vs_validation_shapes_are_explained_separately():
    from xla_keras.storms.detection import train_vs_validation_note

    train = history_of([tokens(64, 10)] * 5)
    test = history_of([tokens(256, 10)] * 2)
    note = train_vs_validation_note(train, test)
    assert "'x/tokens' axis 0: 64 in training vs 256 in validation" in note
    assert "costs no extra compile" in note
    assert train_vs_validation_note(train, history_of([tokens(64, 10)])) is None
    assert train_vs_validation_note(train, ShapeHistory()) is None


def test_short_lengths_stay_exact_and_dense_long_tails_terminate():
    boundaries, overhead = best_buckets({v: 1 for v in range(9, 19)}, 4)
    assert overhead < 0.10 and boundaries[-1] == 18
    # dense small lengths plus a long spread tail: the candidate grid must coarsen and end
    import time

    start = time.perf_counter()
    boundaries, _ = best_buckets({v: 1 for v in range(1, 5001)}, 4)
    assert time.perf_counter() - start < 5
    assert len(boundaries) <= 4 and boundaries[-1] >= 5000


# ------------------------------------------------------------------ compile budget


@pytest.mark.parametrize(
    "compiles, seconds, steps, steady, budget, expect",
    [
        (8, 3.2, 14, 0.005, 0.1, (2.8, 3.27, 2.8 / 3.27)),  # validation: 8 compiles, 14 steps: far over
        (2, 0.6, 12_000, 0.002, 0.1, None),  # one extra compile in a long fit: 1%
        (1, 0.9, 10, 0.001, 0.1, None),  # the first compile is XLA's price, never advised
        (3, 0.3, 100, 0.002, 0.5, None),  # 0.2 s of 0.5 s = 40%: under a 50% budget
        (3, 0.3, 100, 0.002, None, None),  # no budget
        (4, 0.4, 0, None, 0.1, (0.3, 0.4, 0.75)),  # no steady step measured: compiles are the time
    ],
)
def test_over_budget_counts_the_compiles_beyond_the_first(compiles, seconds, steps, steady, budget, expect):
    from xla_keras.storms.budget import over_budget

    got = over_budget(compiles, seconds, steps, steady, budget)
    if expect is None:
        assert got is None
    else:
        assert got == pytest.approx(expect, rel=1e-3)


@pytest.mark.parametrize(
    "compiles, seconds, floor, advised",
    [
        (2, 0.8, 1.0, False),  # a demo's partial last batch: 0.4 s beyond the first, 48% of the phase
        (2, 0.8, 0.0, True),  # no floor: the share alone decides
        (2, 2.0, 1.0, True),  # exactly at the floor: 1.0 s beyond the first
        (8, 3.2, 1.0, True),  # 2.8 s beyond the first
        (8, 3.2, 5.0, False),  # a floor set above it
    ],
)
def test_the_compile_budget_also_needs_its_floor_in_seconds(compiles, seconds, floor, advised):
    from xla_keras.storms.budget import over_budget

    got = over_budget(compiles, seconds, 27, 0.001, 0.1, seconds / compiles, floor=floor)
    assert (got is not None) is advised
    if got is not None:
        assert got[2] > 0.1  # the share is over the budget too


# ------------------------------------------------------------------ images of several sizes


def image(rows, height, width=None, dtype="float32"):
    return (Leaf("x", dtype, (rows, height, height if width is None else width, 3)), Leaf("y", "int32", (rows,)))


def pad_to(n, lengths):
    return min(length for length in lengths if length >= n)


def image_history(shapes, runs=1):
    h = ShapeHistory()
    for _ in range(runs):
        for sig in shapes:
            h.observe(sig)
        h.end_of_run()
    return h


IMAGE_SIZES = {24: 6, 28: 3, 32: 4, 40: 5}  # size -> batches of 8


def test_padding_images_is_counted_in_elements_over_both_axes_it_pads():
    shapes = [image(8, size) for size, n in IMAGE_SIZES.items() for _ in range(n)]
    _, advice, fix = analyse("train", image_history(shapes), threshold=8)
    lengths = {t["axis"]: t["lengths"] for t in fix["targets"]}
    assert sorted(lengths) == [1, 2] and lengths[1] == lengths[2]
    # Ground truth: the elements of the batches built above, as fed and once padded to the fix's lengths.
    real = sum(8 * h * w * 3 for h, w in ((s[0].shape[1], s[0].shape[2]) for s in shapes))
    padded = sum(8 * pad_to(s[0].shape[1], lengths[1]) * pad_to(s[0].shape[2], lengths[2]) * 3 for s in shapes)
    assert fix["padding_overhead"] == pytest.approx(padded / real - 1, abs=1e-4)
    one_axis = sum(pad_to(s[0].shape[1], lengths[1]) for s in shapes) / sum(s[0].shape[1] for s in shapes) - 1
    assert fix["padding_overhead"] > one_axis + 0.05  # counting one axis would understate it
    assert fix["padding_overhead"] <= 0.20 and fix["compiles"] == len(lengths[1]) < 8
    stated = f"{padded / real - 1:.0%} more padding than those batches, counted in elements over 'x' axes 1 and 2"
    assert stated in advice


def test_images_of_independent_heights_and_widths_are_counted_jointly():
    rng = random.Random(3)
    pairs = [(rng.choice([20, 24, 28, 36]), rng.choice([30, 32, 44, 48])) for _ in range(40)]
    _, advice, fix = analyse("train", history_of([image(4, h, w) for h, w in pairs]), threshold=8)
    lengths = {p["axis"]: p["lengths"] for p in fix["per_input"]}
    real = sum(h * w for h, w in pairs)
    padded = sum(pad_to(h, lengths[1]) * pad_to(w, lengths[2]) for h, w in pairs)
    assert fix["padding_overhead"] == pytest.approx(padded / real - 1, abs=1e-4)
    combos = {(pad_to(h, lengths[1]), pad_to(w, lengths[2])) for h, w in pairs}
    assert fix["compiles"] == len(combos) < 8


@pytest.mark.parametrize("seed", range(8))
def test_bucket_programme_is_optimal_for_lengths_taken_by_two_axes(seed):
    rng = random.Random(100 + seed)
    lengths = {}
    for _ in range(rng.randint(1, 12)):
        v = rng.randint(8, 80)
        lengths[v] = lengths.get(v, 0) + rng.randint(1, 5)
    k = rng.randint(1, 3)
    boundaries, overhead = best_buckets(lengths, k, power=2)
    # Brute force over every choice of k candidate boundaries, the area (length squared) padded.
    cands = sorted({v if v <= EXACT_UP_TO else -(-v // 8) * 8 for v in lengths})
    best = min(
        best_cost_overhead(lengths, list(combo) + [cands[-1]], power=2)
        for r in range(1, min(k, len(cands)) + 1)
        for combo in itertools.combinations(cands[:-1], r - 1)
    )
    assert overhead == pytest.approx(best, abs=1e-9) and len(boundaries) <= k


LAYERS = ("InputLayer", "Conv2D", "BatchNormalization", "Conv2D", "GlobalAveragePooling2D", "Dense")


def test_zero_padded_images_say_the_outputs_change_and_offer_what_keeps_them():
    # Per size: a batch of 4 rows, then 3 of 8; two epochs.
    shapes = [image(rows, size) for size in (24, 28, 32, 40) for rows in (4, 8, 8, 8)]
    history = image_history(shapes, runs=2)
    _, advice, fix = analyse("train", history, threshold=8, layers=LAYERS)
    changed = fix["padding_changes_values"]
    assert changed["inputs"] == ["x"] and changed["layers"] == ["BatchNormalization", "GlobalAveragePooling2D"]
    assert "Zero-padding changes what this model computes" in advice
    assert "this model's BatchNormalization and GlobalAveragePooling2D layers" in advice
    exact = fix["bucket_by_size"]
    assert exact["kind"] == "bucket_by_size"
    assert exact["targets"] == [{"path": "x", "axis": 1}, {"path": "x", "axis": 2}]
    assert exact["sizes"] == [[24, 24], [28, 28], [32, 32], [40, 40]] and exact["compiles"] == 4
    # Each size holds 4 + 3 x 8 = 28 rows an epoch: batches of 8 leave 4 per size.
    assert exact["batch_size"] == 8 and exact["remainder"] == "drop"
    assert (exact["examples_per_epoch"], exact["dropped_per_epoch"]) == (112, 16)
    assert "batches of one size each, 4 sizes = 4 compiles, nothing padded" in advice
    assert "16 examples of 112 per epoch" in advice and "fix['bucket_by_size']" in advice
    compile(exact["code"], "<fix>", "exec")
    assert exact["code"].count("'kind': 'bucket_by_size'") == 1
    resized = fix["resize"]
    assert resized["size"] == [40, 40] and resized["compiles"] == 1
    assert "tf.image.resize(x, (40, 40))" in resized["code"] and "interpolation changes the pixels" in advice
    compile(resized["code"], "<resize>", "exec")
    assert "Real lengths" not in advice  # an image has none to count
    # The four-line warning says it on the cause's line; the printed report names the exact alternative.
    varying = [a.describe() for a in varying_axes([(sig, 1) for sig in shapes])]
    storm = Storm("train", 9, 8, varying, advice, fix, compiles=8, compile_seconds=2.0)
    lines = storm_text(storm, 0).splitlines()
    assert lines[1] == "Cause: input 'x' axis 1 varies (24..40, 4 values) and 1 more; zero-padding changes the outputs"
    assert len(lines) == 4 and all(len(line) <= 100 for line in lines)
    from xla_keras.report.model import XlaReport
    from xla_keras.report.render import render

    assert ("      zero-padding images changes the outputs; exact: report.storms[0].fix.bucket_by_size\n") in render(
        XlaReport(storms=[storm])
    )
    # Validation keeps every example: each size's last batch padded (4 rows of each).
    _, advice, fix = analyse("test", history, threshold=8, layers=LAYERS)
    assert fix["bucket_by_size"]["padded_rows_per_epoch"] == 16 and "dropped_per_epoch" not in fix["bucket_by_size"]
    # Predict: batches of one size each would reorder the outputs.
    _, advice, fix = analyse("predict", history, threshold=8)
    assert "bucket_by_size" not in fix and "not offered for predict" in advice
    # As many sizes as the threshold: one compile per size would storm too.
    _, advice, fix = analyse("train", history, threshold=4)
    assert "bucket_by_size" not in fix and "4 sizes, not below storm_threshold" in advice


def test_what_the_advice_says_of_the_model_follows_its_layers():
    history = history_of([image(8, size) for size in (24, 28, 32, 40)])
    _, advice, fix = analyse("train", history, threshold=8)  # the layers were not read
    assert "layers" not in fix["padding_changes_values"]
    assert "enter every layer that pools or normalises over the image" in advice
    _, advice, fix = analyse("train", history, threshold=8, layers=("Conv2D", "Conv2D"))
    assert fix["padding_changes_values"]["layers"] == [] and "Zero-padding can change what this model" in advice


@pytest.mark.parametrize(
    "leaf",
    [
        Leaf("x", "int32", (8, 0, 0, 3)),  # integer ids, not pixels
        Leaf("x", "float32", (8, 0, 5)),  # float features of a sequence: one axis padded
    ],
)
def test_only_float_inputs_padded_on_two_axes_are_images(leaf):
    def shaped(n):
        return (Leaf(leaf.path, leaf.dtype, tuple(n if d == 0 else d for d in leaf.shape)), Leaf("y", "f", (8,)))

    _, advice, fix = analyse("train", history_of([shaped(n) for n in (24, 28, 32, 40)]), threshold=8, layers=LAYERS)
    assert fix["kind"] == "pad_to_lengths" and "padding_changes_values" not in fix and "bucket_by_size" not in fix
    assert "Zero-padding" not in advice


def test_batches_with_the_lengths_of_an_applied_fix_are_recognised():
    from xla_keras.session.storm_analysis import already_fixed
    from xla_keras.storms.fixes import AppliedLengths

    # Sequences already padded to [48, 64]: one length would pad 14% more, under the 20% target.
    history = history_of([tokens(8, n) for n in [48] * 4 + [64] * 4])
    _, advice, fix = analyse("train", history, threshold=8)
    assert fix["lengths"] == [64] and not already_fixed(history, fix)  # advice to merge them
    applied = (AppliedLengths("pad_to_lengths", (("x/tokens", 1, (48, 64)),)),)
    assert already_fixed(history, fix, applied)
    _, advice, _ = analyse("train", history, threshold=8, applied=applied)
    assert advice.startswith(
        "These batches already have the lengths of a pad_to_lengths fix that xla_keras.data applied in this "
        "process ('x/tokens' axis 1: [48, 64]): their compiles are the ones it stated."
    )
    other = (AppliedLengths("pad_to_lengths", (("x/tokens", 1, (48, 96)),)),)  # 64 is none of its lengths
    assert not already_fixed(history, fix, other)
    # Images: both padded axes must take the applied fix's lengths.
    images = history_of([image(8, 32)] * 3 + [image(8, 40)] * 3)
    _, _, fix = analyse("train", images, threshold=8)
    one_axis = (AppliedLengths("pad_to_lengths", (("x", 1, (32, 40)),)),)
    both = (AppliedLengths("pad_to_lengths", (("x", 1, (32, 40)), ("x", 2, (32, 40)))),)
    assert analyse("train", images, threshold=8, applied=both)[1].startswith("These batches already have")
    assert not analyse("train", images, threshold=8, applied=one_axis)[1].startswith("These batches")


def test_a_pad_fix_that_pads_nothing_and_changes_no_rows_is_no_fix():
    from xla_keras.session.storm_analysis import already_fixed

    # The pad fix's own output, [32, 40]: padding both to 40 would add 37% of elements (over the target).
    history = history_of([image(8, 32)] * 9 + [image(8, 40)] * 3)
    _, _, fix = analyse("train", history, threshold=8)
    assert fix["lengths"] == [32, 40] and fix["padding_overhead"] == 0.0 and already_fixed(history, fix)
    # With a partial batch in the middle, the fix still changes the rows: it is one.
    history = history_of([image(8, 32)] * 9 + [image(5, 32)] + [image(8, 40)] * 3)
    _, _, fix = analyse("train", history, threshold=8)
    assert not already_fixed(history, fix)
