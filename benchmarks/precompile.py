"""Precompile against compiling in the loop: whole fits, precompile included, in fresh processes.

Each child fits the same model (Embedding -> Conv1D -> Dropout -> GlobalMaxPooling1D -> Dense, Adam,
``jit_compile=True``) for 2 epochs on a bucketed ``tf.data`` pipeline (``bucket_by_sequence_length`` to 8
boundaries, padded to each, remainder dropped: 8 batch shapes, each new length compiling in epoch 1 without
precompile), monitored by ``XlaMonitor(jit="on")``: without precompile, and with the 8 shapes given as
specs (JAX: on 1 thread and on every core, ``precompile_threads``). Children run interleaved, one of each per
round, for ``--rounds`` rounds per backend (``--quick``: one round, 4 of the boundaries, one epoch: a smoke
run); reported: each way's median whole-fit seconds (from just before
``fit`` to its end: the precompile is inside), their ratio to the fit without, and per shape the compile
seconds in the loop (without precompile) against before it (serial, parallel), from the report's records
(JAX: its compile events; TensorFlow: the profiler).

    python benchmarks/precompile.py [--rounds 5] [--backend tensorflow|jax|both] [--quick]
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
BOUNDARIES = [16, 32, 48, 64, 80, 96, 112, 128]
QUICK_BOUNDARIES = BOUNDARIES[1::2]  # 32, 64, 96, 128: every length still falls in one
BATCH = 16


def child(way: str, log_dir: str, quick: bool) -> None:
    import keras
    import numpy as np
    import tensorflow as tf

    import xla_keras

    boundaries = QUICK_BOUNDARIES if quick else BOUNDARIES
    rng = np.random.default_rng(0)
    lengths = rng.integers(2, boundaries[-1], size=384)
    tokens = [rng.integers(1, 64, size=length).astype(np.int32) for length in lengths]
    labels = rng.integers(0, 2, size=len(tokens)).astype(np.float32)
    data = tf.data.Dataset.from_generator(
        lambda: zip(tokens, labels),
        output_signature=(tf.TensorSpec([None], tf.int32), tf.TensorSpec([], tf.float32)),
    ).bucket_by_sequence_length(
        lambda x, y: tf.shape(x)[0],
        bucket_boundaries=boundaries,
        bucket_batch_sizes=[BATCH] * (len(boundaries) + 1),
        pad_to_bucket_boundary=True,
        drop_remainder=True,
    )
    keras.utils.set_random_seed(7)
    model = keras.Sequential(
        [
            keras.layers.Embedding(64, 16),
            keras.layers.Conv1D(32, 5, padding="same", activation="relu"),
            keras.layers.Dropout(0.3),
            keras.layers.GlobalMaxPooling1D(),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer="adam", loss="mse", jit_compile=True)
    specs = [
        (keras.InputSpec(shape=(BATCH, b - 1), dtype="int32"), keras.InputSpec(shape=(BATCH,), dtype="float32"))
        for b in boundaries
    ]
    threads = None if way == "none" else int(way.split(":")[1])
    monitor = xla_keras.XlaMonitor(
        log_dir=log_dir,
        jit="on",
        precompile=None if way == "none" else specs,
        precompile_threads=threads,
        verbose=0,
    )
    began = time.perf_counter()
    model.fit(data, epochs=1 if quick else 2, callbacks=[monitor], verbose=0)
    seconds = time.perf_counter() - began
    report = monitor.report
    train = [c for c in report.compilations if c.phase == "train"]
    facts = {
        "seconds": seconds,
        "compile_seconds": [c.seconds for c in train],
        "in_loop": sum(1 for c in train if not c.precompiled),
        "precompile": report.precompile.get("train"),
    }
    print("XLA_KERAS_PRECOMPILE_BENCH " + json.dumps(facts), flush=True)


def run(way: str, backend: str, quick: bool) -> dict:
    env = dict(os.environ, KERAS_BACKEND=backend, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    with tempfile.TemporaryDirectory() as log_dir:
        proc = subprocess.run(
            [sys.executable, __file__, "--child", way, log_dir, *(["--quick"] if quick else [])],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("XLA_KERAS_PRECOMPILE_BENCH ")][-1]
    return json.loads(line.split(" ", 1)[1])


def measure(backend: str, rounds: int, quick: bool) -> dict:
    cores = os.cpu_count() or 1
    parallel = backend == "jax" and cores > 1  # TensorFlow's precompile runs one shape after another
    ways = ["none", "precompile:1"] + ([f"precompile:{cores}"] if parallel else [])
    runs: dict = {way: [] for way in ways}
    for _ in range(rounds):
        for way in ways:
            runs[way].append(run(way, backend, quick))
    median = {way: statistics.median(r["seconds"] for r in runs[way]) for way in ways}
    per_shape = {way: statistics.median(s for r in runs[way] for s in r["compile_seconds"]) for way in ways}
    precompile_wall = {
        way: statistics.median(r["precompile"]["seconds"] for r in runs[way]) for way in ways if way != "none"
    }
    return {
        "backend": backend,
        "rounds": rounds,
        "cores": cores,
        "median_seconds": median,
        "ratio_to_none": {way: median[way] / median["none"] for way in ways},
        "compile_seconds_per_shape": per_shape,
        "precompile_wall_seconds": precompile_wall,
        "compiles_in_loop": {way: statistics.median(r["in_loop"] for r in runs[way]) for way in ways},
        "all": {way: [r["seconds"] for r in runs[way]] for way in ways},
    }


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], quick=sys.argv[4:] == ["--quick"])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backend", choices=("tensorflow", "jax", "both"), default="both")
    parser.add_argument("--quick", action="store_true", help="one round of a smaller fit per backend (a smoke run)")
    args = parser.parse_args(argv)
    rounds = 1 if args.quick else args.rounds
    backends = ("tensorflow", "jax") if args.backend == "both" else (args.backend,)
    for backend in backends:
        result = measure(backend, rounds, args.quick)
        print(f"backend={backend}: whole fit, precompile included (medians of {rounds} interleaved processes)")
        for way, seconds in result["median_seconds"].items():
            wall = result["precompile_wall_seconds"].get(way)
            print(
                f"  {way:14s} {seconds:7.2f} s  x{result['ratio_to_none'][way]:.2f} vs none  "
                f"compiles in the loop {result['compiles_in_loop'][way]:.0f}  "
                f"compile per shape {result['compile_seconds_per_shape'][way]:.2f} s"
                + (f"  precompile {wall:.2f} s" if wall is not None else "")
            )
        serial = result["compile_seconds_per_shape"]["precompile:1"]
        if backend == "jax":  # an estimate from the serial figure, not a measurement: one round of compiles
            shapes = len(QUICK_BOUNDARIES if args.quick else BOUNDARIES)
            for cores in (result["cores"], 16):
                rounds_needed = -(-shapes // cores)
                print(
                    f"  estimate on {cores} cores: {shapes} shapes in {rounds_needed} round(s) of "
                    f"{serial:.2f} s = {rounds_needed * serial:.2f} s of precompile (each compile alone on a core)"
                )
        print("XLA_KERAS_BENCH " + json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
