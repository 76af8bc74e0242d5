"""Compile accounting vs XLA's own account, over several shape scenarios.

Each scenario is a real fit in a fresh process (tests/scenario.py) with
``XLA_FLAGS=--xla_dump_to`` (ground truth for counts: one
``*before_optimizations.txt`` per compiled module) and
``TF_CPP_VMODULE=device_compiler=1`` (ground truth for seconds: TensorFlow's
"Compilation of XLA executable time" lines). Also the timing fallback (the
profiler held by someone else), whose error is stated, not hidden.

    python benchmarks/accuracy.py [--quick]
"""

import argparse
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

from scenario import run_scenario  # noqa: E402

SCENARIOS = [
    # (label, scenario, jit, kwargs)
    ("batch sizes 16..23, jit on", "batch_sizes", "on", {}),
    ("partial batch + validation, jit on", "partial_batch", "on", {}),
    ("padded_batch sequences, jit on", "padded", "on", {}),
    ("steps_per_execution=4, jit on", "steps_per_execution", "on", {}),
    ("dict inputs + sample_weight, jit on", "nested", "on", {}),
    ("auto-clustering (env flag)", "partial_batch", "autoclustering", {"env_flags": "--tf_xla_cpu_global_jit"}),
    ("jit off", "partial_batch", "off", {}),
    ("timing fallback (profiler busy)", "batch_sizes", "on", {"extra_args": ("--profiler-busy",)}),
]
# --quick proves the script runs (tests/test_benchmarks.py): one scenario, the one only this script
# runs with its own log dir; every scenario above is checked against XLA's dump in tests/conftest.py.
QUICK = {"timing fallback (profiler busy)"}


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="one scenario only")
    args = parser.parse_args(argv)
    rows = []
    for label, scenario, jit, kwargs in SCENARIOS:
        if args.quick and label not in QUICK:
            continue
        tmp = tempfile.mkdtemp(prefix="xla_keras_accuracy_")
        extra = tuple(kwargs.get("extra_args", ()))
        if "--profiler-busy" in extra:
            extra += ("--log-dir", os.path.join(tmp, "logs"))
        run = run_scenario(tmp, scenario, jit, env_flags=kwargs.get("env_flags", ""), extra_args=extra)
        reported = sum(run.report["compilation_count"].values())
        truth_s = sum(run.tf_compile_seconds)
        ours_s = run.report["compile_seconds"]
        error = (ours_s - truth_s) / truth_s if truth_s else None
        sources = sorted({c["source"] for c in run.report["compilations"]}) or ["-"]
        rows.append((label, reported, run.dump_modules, ours_s, truth_s, error, "/".join(sources)))
    print(f"{'scenario':38s} {'compiles':>8s} {'dumped':>7s} {'ours s':>8s} {'TF s':>8s} {'error':>7s}  source")
    for label, reported, dumped, ours_s, truth_s, error, source in rows:
        err = f"{error:+.1%}" if error is not None else "n/a"
        mark = "" if reported == dumped else "  COUNT MISMATCH"
        print(f"{label:38s} {reported:8d} {dumped:7d} {ours_s:8.3f} {truth_s:8.3f} {err:>7s}  {source}{mark}")
    return rows


if __name__ == "__main__":
    main()
