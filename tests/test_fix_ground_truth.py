"""Storm fixes applied with ``xla_keras.data.apply_fix`` / ``bucket_by_length`` on fresh models:
the compiles fall to the number the advice states, counted in XLA's own dump, and the stated
real padding equals the generator's exact token counts. One subprocess per Keras backend
(tests/fix_scenarios.py), both run side by side."""

import collections
import os
import sys

import pytest

pytest.importorskip("keras")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from backend_runs import BACKENDS, backend_jobs  # noqa: E402 - tests/ is on the path now
from runs import Runs  # noqa: E402

pytestmark = [pytest.mark.scenario, pytest.mark.xdist_group("test_fix_ground_truth")]


def _backend_jobs(root):
    return backend_jobs("fix_scenarios.py", root, "fix scenarios")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return Runs(_backend_jobs, tmp_path_factory, "test_fix_ground_truth::runs")


def _xla_modules(run, backend):
    """Modules of the model's step programs XLA dumped during the fit (JAX: its step modules only;
    helper executables such as metric updates are not steps)."""
    if backend == "jax":
        return collections.Counter(name for name in run["dump"] if name.endswith("_step"))
    return collections.Counter({"all": len(run["dump"])})


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_padding_fix_compiles_as_advised(runs, backend):
    results = runs[backend]
    fix = results["storm"]["report"]["storms"][0]["fix"]
    run = results["pad"]
    assert fix["kind"] == "pad_to_lengths" and fix["remainder"] == "drop"
    modules = sum(_xla_modules(run, backend).values())
    assert modules == run["report"]["compilation_count"]["train"] == fix["compiles"]
    assert run["report"]["storms"] == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_bucketing_by_real_length_compiles_once_per_bucket(runs, backend):
    results = runs[backend]
    bucket = results["storm"]["report"]["storms"][0]["fix"]["bucket_by_length"]
    run = results["bucket"]
    modules = sum(_xla_modules(run, backend).values())
    assert modules == run["report"]["compilation_count"]["train"] == bucket["compiles"] < 8
    assert run["report"]["storms"] == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_batch_size_fix_compiles_once(runs, backend):
    run = runs[backend]["batch_size"]
    fix = run["storm"]["storms"][0]["fix"]
    assert fix["kind"] == "fixed_batch_size" and fix["size"] in range(16, 24)
    assert sum(_xla_modules(run, backend).values()) == run["report"]["compilation_count"]["train"] == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_stated_real_padding_equals_the_exact_token_count(runs, backend):
    storm = runs[backend]["storm"]
    fix = storm["report"]["storms"][0]["fix"]
    real = fix["real_lengths"]
    assert real["measured"] and real["real_tokens"] == storm["real_tokens"]  # every batch sampled: exact
    assert fix["batches_real_padding_overhead"] == pytest.approx(
        storm["fed_tokens"] / storm["real_tokens"] - 1, abs=1e-4
    )
    assert fix["real_padding_overhead"] > fix["bucket_by_length"]["real_padding_overhead"]
    assert fix["better_fix"] == "bucket_by_length"
    assert "Bucketing saves more compute" in storm["report"]["storms"][0]["advice"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_validation_over_the_compile_budget_gets_the_advice_and_its_fix_works(runs, backend):
    budget = runs[backend]["budget"]
    report = budget["report"]
    assert report["storms"] == [] and report["compilation_count"]["train"] == 1
    (advice,) = report["advice"]
    assert advice["phase"] == "test" and advice["share"] > advice["budget"] == 0.1
    assert advice["compiles"] == report["compilation_count"]["test"] >= 3
    fix = advice["fix"]
    assert fix["kind"] == "pad_to_lengths" and fix["remainder"] == "pad" and fix["drop_remainder"] is False
    assert fix["real_lengths"]["real_tokens"] == 2 * budget["real_tokens"]  # two validation runs, all sampled
    assert (
        "Compile budget (test, fit 1): validation compiled" in advice["advice"] and "weigh nothing" in advice["advice"]
    )
    fixed = runs[backend]["budget_fixed"]
    counts = fixed["report"]["compilation_count"]
    assert counts["test"] == fix["compiles"] and counts["train"] == 1 and fixed["report"]["advice"] == []
    if backend == "jax":
        assert _xla_modules(fixed, backend) == {"jit_train_step": 1, "jit_test_step": fix["compiles"]}
    else:
        assert sum(_xla_modules(fixed, backend).values()) == 1 + fix["compiles"]
    # Zero-weight padded rows: the metric over the fixed pipeline is the metric over the original.
    assert fixed["mae"]["fixed"] == pytest.approx(fixed["mae"]["original"], rel=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_padding_images_is_stated_in_elements_over_both_axes(runs, backend):
    images = runs[backend]["images"]
    (storm,) = images["report"]["storms"]
    fix = storm["fix"]
    assert fix["kind"] == "pad_to_lengths" and {t["axis"] for t in fix["targets"]} == {1, 2}
    # The elements of the batches the scenario built, as fed and once zero-padded to the fix's lengths.
    overhead = images["padded_elements"] / images["real_elements"] - 1
    assert fix["padding_overhead"] == pytest.approx(overhead, abs=1e-4)
    assert (
        f"{overhead:.0%} more padding than those batches, counted in elements over 'x' axes 1 and 2"
        in (storm["advice"])
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_advice_says_zero_padding_changes_the_logits_and_the_exact_alternative_keeps_them(runs, backend):
    results = runs[backend]
    storm = results["images"]["report"]["storms"][0]
    fix = storm["fix"]
    # The storm's model on the images as built and zero-padded (numpy, in the scenario): the logits move.
    assert results["images"]["logits_change"] > 1e-2
    assert fix["padding_changes_values"]["layers"] == ["BatchNormalization", "GlobalAveragePooling2D"]
    assert "Zero-padding changes what this model computes" in storm["advice"]
    # Batches of one size each: every image's logits as they were, and one compile per size.
    exact, run = fix["bucket_by_size"], results["images_exact"]
    assert run["unknown_rows"] == 0 and run["logits_change"] < 1e-4
    assert run["shapes"] == [[8, s, s, 3] for s in (24, 28, 32, 40)]
    assert run["rows"] == exact["examples_per_epoch"] - exact["dropped_per_epoch"] == 96
    modules = sum(_xla_modules(run, backend).values())
    assert modules == run["report"]["compilation_count"]["train"] == exact["compiles"] == 4


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_fit_on_the_fixed_images_is_not_advised_to_pad_again(runs, backend):
    results = runs[backend]
    fix = results["images"]["report"]["storms"][0]["fix"]
    pad, exact = results["images_pad"], results["images_exact"]
    # The pad fix: the compiles it stated, in XLA's dump; no storm, no compile budget advice (no floor).
    assert sum(_xla_modules(pad, backend).values()) == pad["report"]["compilation_count"]["train"] == fix["compiles"]
    assert pad["report"]["storms"] == [] and pad["report"]["advice"] == []
    assert exact["report"]["storms"] == [] and exact["report"]["advice"] == []
    # The same batches of one size each, the record of the applied fix forgotten: the budget speaks
    # (its recompiles are most of the fit) and would pad them, which the fix applied does not.
    control = results["images_exact_unrecognised"]
    assert sum(_xla_modules(control, backend).values()) == 4
    (advice,) = control["report"]["advice"]
    assert advice["fix"]["kind"] == "pad_to_lengths" and advice["share"] > advice["budget"]
