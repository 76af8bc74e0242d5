"""The persistent compilation cache, with ground truth: two fresh processes
sharing a cache directory, XLA's dump and TensorFlow's own compile-time lines."""

import json
import os

import pytest
from runs import Runs
from scenario import run_scenario

pytestmark = [pytest.mark.scenario, pytest.mark.xdist_group("test_cache")]


def _total(run):
    return sum(run.report["compilation_count"].values())


def _cache_jobs(root):
    """Three independent chains of fresh processes: the env flag's (process 1 compiles and fills the
    cache, process 2 loads), configure(cache_dir=...)'s (the same), and a late configure."""

    def pair(name, **kwargs):
        first = run_scenario(str(root / name / "p1"), "partial_batch", "on", **kwargs)
        return first, run_scenario(str(root / name / "p2"), "partial_batch", "on", **kwargs)

    def storm_pair():
        flag = f"--tf_xla_persistent_cache_directory={root / 'storm' / 'cache'}"
        first = run_scenario(str(root / "storm" / "p1"), "storm", "on", env_flags=flag)
        return first, run_scenario(str(root / "storm" / "p2"), "storm", "on", env_flags=flag)

    env_flag = f"--tf_xla_persistent_cache_directory={root / 'env' / 'cache'}"
    late_cache = str(root / "late" / "cache")
    return {
        "env": lambda: pair("env", env_flags=env_flag),
        "storm": storm_pair,
        "configure": lambda: pair("configure", extra_args=("--cache-dir", str(root / "configure" / "cache"))),
        "late": lambda: run_scenario(
            str(root / "late" / "p"), "partial_batch", "on", extra_args=("--cache-dir-late", late_cache)
        ),
    }


@pytest.fixture(scope="module")
def cache_runs(tmp_path_factory):
    return Runs(_cache_jobs, tmp_path_factory, "test_cache::cache_runs")


@pytest.fixture(scope="module")
def env_runs(cache_runs):
    """Process 1 compiles and fills the cache; process 2 (same cache, env flag) loads."""
    first, second = cache_runs["env"]
    return cache_runs.root / "env" / "cache", first, second


def test_first_process_compiles_fresh_and_fills_the_cache(env_runs):
    cache, first, _ = env_runs
    assert _total(first) == first.dump_modules == 4
    assert not any(c["cached"] for c in first.report["compilations"])
    files = [f for f in os.listdir(cache) if f.startswith("xla_compile_cache__")]
    assert len(files) == first.dump_modules  # one cache file per executable
    assert first.report["cache_saved_seconds"] is None


def test_second_process_reports_cache_loads_and_what_they_saved(env_runs):
    _, first, second = env_runs
    report = second.report
    assert second.dump_modules == 0  # nothing compiled: a load writes no dump file
    assert _total(second) == 4 and all(c["cached"] for c in report["compilations"])
    # Load times against TensorFlow's own lines for the loads, and what the cache saved against
    # the difference of TensorFlow's lines between the two processes.
    assert report["compile_seconds"] == pytest.approx(sum(second.tf_compile_seconds), rel=0.15)
    truth_saved = sum(first.tf_compile_seconds) - sum(second.tf_compile_seconds)
    assert truth_saved > 0
    assert report["cache_saved_seconds"] == pytest.approx(truth_saved, rel=0.15)
    assert report["compile_seconds"] < 0.4 * first.report["compile_seconds"]


def test_configure_cache_dir_works_and_a_late_call_says_so(cache_runs):
    first, second = cache_runs["configure"]
    assert first.dump_modules == 4 and second.dump_modules == 0
    assert all(c["cached"] for c in second.report["compilations"]) and _total(second) == 4
    late = cache_runs["late"]
    late_cache = cache_runs.root / "late" / "cache"
    assert late.dump_modules == 4 and not any(c["cached"] for c in late.report["compilations"])
    assert not [f for f in os.listdir(late_cache) if f.startswith("xla_compile_cache__")]
    assert "came too late" in late.stderr
    assert any("configured too late" in note for note in late.report["notes"])


def test_sidecar_holds_fresh_compile_seconds(env_runs):
    from xla_keras.core.cache import ENTRIES

    cache, first, _ = env_runs
    entries = [json.loads(path.read_text()) for path in (cache / ENTRIES).glob("*.json")]
    assert sorted(e["seconds"] for e in entries) == pytest.approx(
        sorted(c["seconds"] for c in first.report["compilations"])
    )


def test_every_storm_compile_is_probed_where_the_cache_may_serve_it(cache_runs):
    # Past the probes' budget a new shape is counted as a compile without a probe; with the cache a new shape
    # may be a load instead, which only a probe tells: every one is probed, and the loads are said as loads.
    first, second = cache_runs["storm"]
    assert _total(first) == first.dump_modules > 8 and second.dump_modules == 0
    assert _total(second) == first.dump_modules and all(c["cached"] for c in second.report["compilations"])
    for run in (first, second):
        assert not [c for c in run.report["compilations"] if c["estimated_because"] == "probe_budget"]
