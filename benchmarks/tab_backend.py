"""The XLA tab's backend on a big run: 20,000 train steps (a step-time scalar at every one, as
update_freq="batch" writes) and 1,000 compiles, written by the monitor's own sink.

Measures what a user waits for when opening the tab, in backend time (TensorBoard's data provider,
our routes, JSON encoding; no browser): the first request of each route (the report is decoded
once per new version) and the same requests again. TensorBoard's reading of the event files into
its data provider happens in its reload thread, not in a request: it is reported apart.

    python benchmarks/tab_backend.py [--quick]
"""

import argparse
import json
import os
import tempfile
import time


def write_big_run(log_dir, steps, compiles):
    from xla_keras.core.signatures import Leaf
    from xla_keras.core.types import Scalar
    from xla_keras.report.model import Compilation, XlaReport
    from xla_keras.storms.detection import Storm
    from xla_keras.tensorboard.sink import OutputSink

    records = [
        Compilation(
            "train",
            1 + i * (steps // compiles),
            (Leaf("x", "int32", (64, 16 + i)), Leaf("y", "float32", (64, 1))),
            0.25,
            "profiler",
        )
        for i in range(compiles)
    ]
    storm = Storm(
        "train",
        8,
        8,
        [{"path": "x", "axis": 1, "min": 16, "max": 16 + compiles, "n_values": 64, "values": list(range(16, 80))}],
        "pad x",
        {"kind": "pad_to_lengths", "code": "ds = ds.padded_batch(64)"},
        8,
        2.0,
        0.002,
        1,
        "warn",
    )
    report = XlaReport(
        jit_mode="on",
        jit_active=True,
        jit_reason="asked",
        compilations=records,
        compilation_count={"train": compiles, "test": 0, "predict": 0},
        distinct_signatures={"train": compiles, "test": 0, "predict": 0},
        storms=[storm],
        steps={"train": steps, "test": 0, "predict": 0},
        steady_step_seconds=0.002,
        compile_seconds=0.25 * compiles,
        wall_seconds=0.25 * compiles + 0.002 * steps,
    )
    sink = OutputSink(log_dir)
    sink.scalars(Scalar("train", "xla/step_time_ms", 2.0 + (s % 7) / 10, s) for s in range(1, steps + 1))
    sink.flush(report=lambda: report, text=True, step=steps)
    sink.close()
    return report


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    steps, compiles = (2000, 100) if args.quick else (20000, 1000)
    from tensorboard.backend import application
    from tensorboard.backend.event_processing import data_ingester, data_provider, plugin_event_multiplexer
    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client

    from xla_keras.tensorboard.plugin import XlaPlugin

    with tempfile.TemporaryDirectory() as logdir:
        write_big_run(os.path.join(logdir, "big"), steps, compiles)
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(logdir) for f in fs)
        start = time.perf_counter()
        multiplexer = plugin_event_multiplexer.EventMultiplexer(
            size_guidance=data_ingester.DEFAULT_SIZE_GUIDANCE,
            tensor_size_guidance=data_ingester.DEFAULT_TENSOR_SIZE_GUIDANCE,
        )
        multiplexer.AddRunsFromDirectory(logdir)
        multiplexer.Reload()
        load = time.perf_counter() - start
        provider = data_provider.MultiplexerDataProvider(multiplexer, logdir)
        plugin = XlaPlugin(base_plugin.TBContext(logdir=logdir, data_provider=provider, multiplexer=multiplexer))
        client = Client(application.TensorBoardWSGI([plugin], data_provider=provider))
        routes = ["/runs", "/report?run=big", "/steps?run=big"]

        def open_tab():
            start = time.perf_counter()
            sizes = []
            for route in routes:
                response = client.get("/data/plugin/xla_keras" + route)
                assert response.status_code == 200, response.get_data()[:300]
                sizes.append(len(response.get_data()))
            return time.perf_counter() - start, sizes

        first, sizes = open_tab()
        again = min(open_tab()[0] for _ in range(5))
        ledger = len(json.loads(client.get("/data/plugin/xla_keras/report?run=big").get_data())["ledger"])
    print(
        f"a run of {steps} steps and {compiles} compiles ({size / 1e6:.1f} MB of event files); "
        f"the ledger has {ledger} rows"
    )
    print(f"TensorBoard reads the event files (its reload thread, not a request): {load * 1e3:.0f} ms")
    print(
        f"opening the tab (/runs + /report + /steps, {sum(sizes) / 1e3:.0f} kB of JSON): "
        f"first {first * 1e3:.0f} ms of backend time, again {again * 1e3:.0f} ms (best of 5)"
    )


if __name__ == "__main__":
    main()
