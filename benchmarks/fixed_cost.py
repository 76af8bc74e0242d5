"""The fixed cost of a monitored fit: a short fit, monitored against bare, in fresh processes.

Each child process builds the same small MLP (20 -> 64 -> 1, Adam, ``jit_compile=True`` on TensorFlow; the
JAX backend jits by default), then times, from just before ``import xla_keras`` (bare: the same point) to
the end of ``fit``: 2 epochs of 10 steps of 32 rows. The monitored child adds
``XlaMonitor(log_dir=...)`` with its defaults (its verbose summary printed, a profiler trace window, the
cost card, the report file written). Children run interleaved, bare then monitored, for ``--rounds`` rounds
per backend; reported: each side's median, and the monitored median minus the bare one (the fixed cost,
whatever the fit's length). A child's framework import and its model's build are outside the timed span
(the same for both). The children may write bytecode (``PYTHONDONTWRITEBYTECODE`` unset), as a package pip
installed has: a first child per backend warms the caches and is not counted.

    python benchmarks/fixed_cost.py [--rounds 5] [--backend tensorflow|jax|both] [--quick]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def child(mode: str, log_dir: str) -> None:
    import keras
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.standard_normal((320, 20)).astype("float32")
    y = rng.standard_normal((320, 1)).astype("float32")
    model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)])
    model.compile("adam", "mse", jit_compile=True)
    began = time.perf_counter()
    callbacks, facts = [], {}
    if mode == "monitored":
        from xla_keras import XlaMonitor  # the package loads its modules on this first use

        facts["import_seconds"] = time.perf_counter() - began
        callbacks = [XlaMonitor(log_dir=log_dir)]
    model.fit(x, y, batch_size=32, epochs=2, verbose=0, callbacks=callbacks)
    facts["seconds"] = time.perf_counter() - began
    if callbacks:
        facts["own_seconds"] = callbacks[0].report.own_seconds
    print("XLA_KERAS_FIXED " + json.dumps(facts), flush=True)


def run(mode: str, backend: str) -> dict:
    env = dict(os.environ, KERAS_BACKEND=backend, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package's modules are compiled once, at install
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    with tempfile.TemporaryDirectory() as log_dir:
        proc = subprocess.run(
            [sys.executable, __file__, "--child", mode, log_dir], env=env, capture_output=True, text=True, timeout=600
        )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("XLA_KERAS_FIXED ")][-1]
    return json.loads(line.split(" ", 1)[1])


def measure(backend: str, rounds: int) -> dict:
    times: dict = {"bare": [], "monitored": []}
    own, imports = [], []
    run("monitored", backend)  # warms the bytecode caches: not counted
    for _ in range(rounds):
        for mode in ("bare", "monitored"):
            facts = run(mode, backend)
            times[mode].append(facts["seconds"])
            if mode == "monitored":
                own.append(facts["own_seconds"]["total"])
                imports.append(facts["import_seconds"])
    bare, monitored = statistics.median(times["bare"]), statistics.median(times["monitored"])
    return {
        "backend": backend,
        "rounds": rounds,
        "bare_seconds": bare,
        "monitored_seconds": monitored,
        "fixed_cost_seconds": monitored - bare,
        "import_seconds": statistics.median(imports),
        "own_seconds": statistics.median(own),
        "all": times,
    }


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backend", choices=("tensorflow", "jax", "both"), default="both")
    parser.add_argument("--quick", action="store_true", help="one round per backend (a smoke run)")
    args = parser.parse_args(argv)
    rounds = 1 if args.quick else args.rounds
    backends = ("tensorflow", "jax") if args.backend == "both" else (args.backend,)
    for backend in backends:
        result = measure(backend, rounds)
        print(
            f"{backend:10s} bare {result['bare_seconds']:.3f} s  monitored {result['monitored_seconds']:.3f} s  "
            f"fixed cost {result['fixed_cost_seconds']:+.3f} s  (medians of {rounds} interleaved processes each; "
            f"of it: import xla_keras {result['import_seconds']:.3f} s, the monitor's own work "
            f"{result['own_seconds']:.3f} s)"
        )
        print("XLA_KERAS_BENCH " + json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
