"""Storm detection, causes and computed advice: pure, no TensorFlow."""

import itertools
import random

import pytest

from xla_keras.core.signatures import Leaf, fingerprint
from xla_keras.errors import RecompilationStormError
from xla_keras.storms.advice import analyse
from xla_keras.storms.buckets import EXACT_UP_TO, best_buckets, best_cost_overhead, pad_target
from xla_keras.storms.detection import (
    ShapeHistory,
    Storm,
    StormDetector,
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
    d = StormDetector(threshold, window)
    opened = [s for s in new_at if d.new_signature("train", s) is not None]
    assert opened == ([opens_at] if opens_at else [])


def test_one_storm_at_a_time_and_the_next_after_falling_below():
    d = StormDetector(3, 10)
    results = {s: d.new_signature("train", s) for s in [1, 2, 3, 4, 5]}
    assert results[3] == (3, 1) and results[4] is None and results[5] is None  # same storm
    assert d.new_signature("train", 30) is None  # window emptied: storm closed
    assert d.new_signature("train", 31) is None
    assert d.new_signature("train", 32) == (3, 30)  # a second storm


def test_phases_are_independent():
    d = StormDetector(2, 10)
    assert d.new_signature("train", 1) is None
    assert d.new_signature("test", 1) is None
    assert d.new_signature("test", 2) == (2, 1)


@pytest.mark.parametrize(
    "kwargs", [{"threshold": 1}, {"threshold": True}, {"threshold": 2.5}, {"window": 0}, {"window": "200"}]
)
def test_detector_rejects_bad_settings(kwargs):
    with pytest.raises(ValueError, match="storm_"):
        StormDetector(**{"threshold": 8, "window": 200, **kwargs})


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
