"""jit="fastest" against the better of jit="off" and jit="on", whole fits side by side (issue #17).

Workloads (each fit is a fresh model, so every fastest fit runs its own trial):

  mlp     Dense 32 -> 64 -> 64 -> 1, batch 64: steps of ~1 ms, XLA within noise on a 2-core CPU
  cnn     Conv2D 8 -> pool -> Conv2D 16 -> pool -> Dense on 16x16x3, batch 64: XLA slower on CPU
  wide    Dense(1024) then 8 x (LayerNorm, gelu, tanh), batch 64: elementwise chains XLA fuses (faster)
  storm   token sequences padded per batch to 8..256 (a new shape most batches): XLA recompiles

Each round fits every configuration once, in a rotating order (machine noise hits them alike);
reported are the median whole-fit seconds over the rounds (first call, trial and compiles
included), the mode fastest kept in each round, and fastest's time against the better of off and
on. The MLP and CNN fits are about the minimum length a decision needs on a 2-core CPU (README,
"jit='fastest'"): on TensorFlow the trial's one-time cost is the XLA function's first call (a
trace and a compile), estimated at 2x the fit's first call, which the time left must be ~33x
longer than. The wide model's first calls cost ~3 s each: its fits must be ~16,000 steps long.

Each fit runs in a fresh Python process (as a user's fit does; one process fitting fifteen models
slowed by up to 40% as it went, and it skewed whichever configuration came late). The data is a
cached, repeated tf.data pipeline fitted with ``steps_per_epoch``: Keras then keeps one iterator
for the whole fit. Fitted from numpy arrays, Keras rebuilds its iterator at every epoch, which cost
0.3-10 s per epoch boundary on a 2-core VM (measured: 16 epochs of the wide model, +0-25 s per
fit at random), noise unrelated to the jit mode and larger than the 5% to resolve. tf.data's
autotuning is off: TensorFlow deletes an autotuned iterator only when its tuning thread next wakes
(rarely, late in a fit), which ended fits up to 17 s after their last step.

    python benchmarks/fastest.py [--quick] [--rounds 5] [--workload mlp,cnn,storm,wide] [--steps N]
        [--backend tensorflow|jax] [--in-process]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

# (train steps per fit for the full run, batches per epoch): the MLP and CNN fits run ~70 s on a 2-core
# CPU, above the ~45-65 s a decision needs there.
LENGTHS = {"mlp": (40000, 2500), "cnn": (16000, 2000), "wide": (16000, 1000), "storm": (3000, 375)}
CONFIGS = ("off", "on", "fastest")
SHAPES = {"mlp": (32,), "cnn": (16, 16, 3), "wide": (1024,)}


def build(kind):
    import keras

    layers = keras.layers
    if kind == "mlp":
        return keras.Sequential(
            [
                keras.Input((32,)),
                layers.Dense(64, activation="relu"),
                layers.Dense(64, activation="relu"),
                layers.Dense(1),
            ]
        )
    if kind == "cnn":
        return keras.Sequential(
            [
                keras.Input((16, 16, 3)),
                layers.Conv2D(8, 3, activation="relu"),
                layers.MaxPooling2D(),
                layers.Conv2D(16, 3, activation="relu"),
                layers.GlobalAveragePooling2D(),
                layers.Dense(1),
            ]
        )
    if kind == "wide":
        inputs = keras.Input((1024,))
        h = layers.Dense(1024)(inputs)
        for _ in range(8):
            h = layers.Activation("tanh")(layers.Activation("gelu")(layers.LayerNormalization()(h)))
        return keras.Model(inputs, layers.Dense(1)(h))
    return keras.Sequential(
        [
            keras.Input((None,), dtype="int32"),
            layers.Embedding(5000, 32),
            layers.GlobalAveragePooling1D(),
            layers.Dense(1),
        ]
    )


def data(kind, batches, rng):
    """One epoch's batches, repeated for the whole fit: a tf.data pipeline (cached, so every epoch
    replays the same batches) that Keras iterates once across epochs with ``steps_per_epoch``."""
    import tensorflow as tf

    if kind != "storm":
        x = rng.random((64 * batches, *SHAPES[kind]), dtype=np.float32)
        y = rng.random((64 * batches, 1), dtype=np.float32)
        dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64, drop_remainder=True)
    else:
        lengths = rng.integers(8, 257, size=32 * batches)
        out = []
        for i in range(batches):
            part = lengths[32 * i : 32 * (i + 1)]
            x = np.zeros((32, int(part.max())), np.int32)
            for row, k in enumerate(part):
                x[row, :k] = rng.integers(1, 5000, size=k)
            out.append((x, rng.random((32, 1), dtype=np.float32)))
        dataset = tf.data.Dataset.from_generator(
            lambda: iter(out),
            output_signature=(tf.TensorSpec((32, None), tf.int32), tf.TensorSpec((32, 1), tf.float32)),
        )
    # No tf.data autotuning: deleting an autotuned iterator waits for its tuning thread's next wake-up
    # (measured: fits ending up to 17 s after their last step, at the same instants: 41.1 s, 142.1 s).
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.cache().repeat().prefetch(2).with_options(options)


def fit_once(kind, config, steps, per_epoch):
    """One whole fit: its seconds (first call, trial and compiles included) and what fastest kept."""
    import keras

    import xla_keras

    dataset = data(kind, per_epoch, np.random.default_rng(0))
    keras.utils.set_random_seed(0)
    model = build(kind)
    model.compile("adam", "mse")
    monitor = xla_keras.XlaMonitor(log_dir=None, jit=config, verbose=0)
    start = time.perf_counter()
    model.fit(dataset, epochs=max(1, steps // per_epoch), steps_per_epoch=per_epoch, verbose=0, callbacks=[monitor])
    seconds = time.perf_counter() - start
    decision = monitor.report.jit_decision or {}
    return {
        "seconds": seconds,
        "mode": decision.get("mode"),
        "basis": decision.get("basis"),
        "why": decision.get("why", ""),
    }


def fit_fresh(kind, config, steps, per_epoch, backend):
    """fit_once in a new Python process: what the fit costs a user who starts one."""
    env = dict(os.environ, **({"KERAS_BACKEND": backend} if backend else {}))
    cmd = [sys.executable, os.path.abspath(__file__), "--fit", f"{kind},{config},{steps},{per_epoch}"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{kind} {config} fit failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="small run that only proves the script works")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workload", default="mlp,cnn,storm", help="comma-separated, from: " + ", ".join(LENGTHS))
    parser.add_argument("--backend", choices=("tensorflow", "jax"), default=None)
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help="train steps per fit instead of the workload's own, in whole epochs (e.g. a fit below the minimum length)",
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="every fit in this process (--quick does): faster to start, drifts over a long run",
    )
    parser.add_argument("--fit", help=argparse.SUPPRESS)  # the child: kind,config,steps,per_epoch
    args = parser.parse_args(argv)
    if args.backend:
        os.environ["KERAS_BACKEND"] = args.backend
    if args.fit:
        kind, config, steps, per_epoch = args.fit.split(",")
        print(json.dumps(fit_once(kind, config, int(steps), int(per_epoch))))
        return
    workloads = args.workload.split(",")
    unknown = [w for w in workloads if w not in LENGTHS]
    if unknown:
        raise SystemExit(f"--workload: unknown {unknown}; choose from {', '.join(LENGTHS)}")
    if args.steps is not None and args.steps < 1:
        raise SystemExit(f"--steps: a positive number of train steps, not {args.steps}")
    if args.quick:
        args.rounds, args.in_process = 1, True
    import keras

    fits = "in this process" if args.in_process else "each in a fresh process"
    print(
        f"backend={keras.backend.backend()} rounds={args.rounds} (whole-fit seconds, medians over rounds; fits {fits})"
    )
    print(f"{'workload':9} {'steps':>6} {'off':>9} {'on':>9} {'fastest':>9}  {'fastest / better':>16}  kept (basis)")
    for kind in workloads:
        steps, per_epoch = LENGTHS[kind]
        steps = args.steps or steps
        if args.quick:  # two short epochs: the script runs, its figures are not the point
            steps, per_epoch = per_epoch // 50 * 2, per_epoch // 50
        steps = max(1, steps // per_epoch) * per_epoch
        times = {c: [] for c in CONFIGS}
        kept, why = [], ""
        for r in range(args.rounds):
            order = CONFIGS[r % 3 :] + CONFIGS[: r % 3]
            for config in order:
                fit = (
                    fit_once(kind, config, steps, per_epoch)
                    if args.in_process
                    else fit_fresh(kind, config, steps, per_epoch, args.backend)
                )
                times[config].append(fit["seconds"])
                if config == "fastest":
                    kept.append(f"{fit['mode']} ({fit['basis']})")
                    why = fit["why"]
            print(
                f"{'':9} round {r + 1}: "
                + " ".join(f"{c} {times[c][-1]:.1f}s" for c in CONFIGS)
                + f" (fastest kept {kept[-1]})",
                flush=True,
            )
        med = {c: statistics.median(v) for c, v in times.items()}
        better = min(med["off"], med["on"])
        # Side by side: each round's fastest fit against that round's fit of the better mode (pairs
        # cancel the machine's drift between rounds; fit times here wander by +-10%).
        best = "off" if med["off"] <= med["on"] else "on"
        paired = statistics.median(f / b for f, b in zip(times["fastest"], times[best]))
        modes = ", ".join(sorted(set(kept), key=kept.index))
        counts = {k: kept.count(k) for k in set(kept)}
        print(
            f"{kind:9} {steps:>6} {med['off']:>8.2f}s {med['on']:>8.2f}s "
            f"{med['fastest']:>8.2f}s  {med['fastest'] / better:>15.3f}x  "
            + "; ".join(f"{k} x{counts[k]}" for k in sorted(counts, key=modes.index)),
            flush=True,
        )
        print(
            f"{'':9} rounds: off {fmt(times['off'])} | on {fmt(times['on'])} | fastest {fmt(times['fastest'])}",
            flush=True,
        )
        print(f"{'':9} paired: median over rounds of fastest / {best} in the same round = {paired:.3f}x", flush=True)
        print(f"{'':9} last: {why}", flush=True)


def fmt(values):
    return " ".join(f"{v:.1f}" for v in values)


if __name__ == "__main__":
    main()
