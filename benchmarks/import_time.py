"""What importing xla_keras adds on top of keras, in fresh processes.

Each sample is a new interpreter that imports keras (and TensorFlow), then
times ``import xla_keras`` and then ``xla_keras.XlaMonitor`` (the first
access loads the callback modules lazily, PEP 562). Median over the samples.
Target (issue #5): under 50 ms extra.

    python benchmarks/import_time.py [--quick] [--samples 7]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = """
import json, sys, time
import keras
t0 = time.perf_counter()
import xla_keras
t1 = time.perf_counter()
xla_keras.XlaMonitor
t2 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "monitor": t2 - t1}))
"""
LIGHT = "import sys, xla_keras; print('tensorflow' in sys.modules or 'keras' in sys.modules)"


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--samples", type=int, default=7)
    args = parser.parse_args(argv)
    if args.quick:
        args.samples = 1
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), TF_CPP_MIN_LOG_LEVEL="3")
    samples = []
    for _ in range(args.samples):
        out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, check=True)
        samples.append(json.loads(out.stdout.strip().splitlines()[-1]))
    light = subprocess.run([sys.executable, "-c", LIGHT], capture_output=True, text=True, env=env, check=True)
    heavy = light.stdout.strip().splitlines()[-1] == "True"
    imp = statistics.median(s["import"] for s in samples)
    mon = statistics.median(s["monitor"] for s in samples)
    print(f"{args.samples} fresh processes, keras already imported; median")
    print(f"import xla_keras                       {imp * 1e3:7.2f} ms")
    print(f"+ first use of xla_keras.XlaMonitor    {mon * 1e3:7.2f} ms")
    print(f"total extra on top of keras            {(imp + mon) * 1e3:7.2f} ms  (target < 50 ms)")
    print(f"'import xla_keras' alone loads TensorFlow/Keras: {'YES' if heavy else 'no'}")
    return {"import": imp, "monitor": mon, "heavy": heavy}


if __name__ == "__main__":
    main()
