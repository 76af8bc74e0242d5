"""The XLA tab's backend routes through werkzeug's test client, over TensorBoard's own data
provider reading event files the monitor's writer wrote (no TensorFlow: written by OutputSink)."""

import gzip
import json
import os

import pytest
from werkzeug.test import Client

from xla_keras.core.tags import TAG_STEP_TIME
from xla_keras.core.types import Scalar
from xla_keras.report.model import XlaReport
from xla_keras.report.schema import REPORT_FILE
from xla_keras.tensorboard.metadata import PLUGIN_NAME, TAG_REPORT_DATA
from xla_keras.tensorboard.sink import OutputSink, SummaryWriters

PREFIX = f"/data/plugin/{PLUGIN_NAME}"


def tab_client(logdir):
    """TensorBoard's WSGI app with the XLA tab and a multiplexer data provider, as `tensorboard`
    builds it with --load_fast=false."""
    from tensorboard.backend import application
    from tensorboard.backend.event_processing import data_ingester, data_provider, plugin_event_multiplexer
    from tensorboard.plugins import base_plugin

    from xla_keras.tensorboard.plugin import XlaPlugin

    multiplexer = plugin_event_multiplexer.EventMultiplexer(  # TensorBoard's defaults (LocalDataIngester)
        size_guidance=data_ingester.DEFAULT_SIZE_GUIDANCE,
        tensor_size_guidance=data_ingester.DEFAULT_TENSOR_SIZE_GUIDANCE,
    )
    multiplexer.AddRunsFromDirectory(str(logdir))
    multiplexer.Reload()
    provider = data_provider.MultiplexerDataProvider(multiplexer, str(logdir))
    plugin = XlaPlugin(base_plugin.TBContext(logdir=str(logdir), data_provider=provider, multiplexer=multiplexer))
    return Client(application.TensorBoardWSGI([plugin], data_provider=provider)), plugin


def get(client, path):
    response = client.get(PREFIX + path)
    return response.status_code, response.get_data()


def get_json(client, path, status=200):
    code, body = get(client, path)
    assert code == status, body[:500]
    return json.loads(body)


def sample_report(n_compiles=3, steps=30, storm=True):
    from xla_keras.core.signatures import Leaf
    from xla_keras.report.model import Compilation
    from xla_keras.storms.detection import Storm

    compiles = [
        Compilation(
            "train",
            1 + 2 * i,
            (Leaf("x", "int32", (8, 80 + i)), Leaf("y", "float32", (8, 1))),
            0.2 + i / 1000,
            "profiler",
        )
        for i in range(n_compiles)
    ]
    storms = (
        [
            Storm(
                "train",
                5,
                3,
                [{"path": "x", "axis": 1, "min": 80, "max": 82, "n_values": 3, "values": []}],
                "pad x",
                {"kind": "pad_to_lengths", "code": "ds = ds.padded_batch(8, padded_shapes=[96])"},
                3,
                0.6,
                0.002,
                1,
                "warn",
            )
        ]
        if storm
        else []
    )
    return XlaReport(
        jit_mode="on",
        jit_active=True,
        jit_reason="asked",
        compilations=compiles,
        compilation_count={"train": n_compiles, "test": 0, "predict": 0},
        distinct_signatures={"train": n_compiles, "test": 0, "predict": 0},
        storms=storms,
        steps={"train": steps, "test": 0, "predict": 0},
        steady_step_seconds=0.002,
        compile_seconds=sum(c.seconds for c in compiles),
        wall_seconds=2.0,
        compile_share=0.3,
    )


def write_run(log_dir, report, steps=30, text=True):
    """What the monitor's sink writes for one fit: step-time scalars and the report."""
    sink = OutputSink(str(log_dir))
    sink.scalars([Scalar("train", TAG_STEP_TIME, 2.0 + (s % 3) / 10, s) for s in range(1, steps + 1)])
    sink.flush(report=lambda: report, text=text, step=steps)
    sink.close()


@pytest.fixture
def logdir(tmp_path):
    write_run(tmp_path / "fit1", sample_report())
    write_run(tmp_path / "compare" / "off", sample_report(n_compiles=0, storm=False))
    return tmp_path


def test_runs_are_the_monitors_log_dirs_with_a_summary_each(logdir):
    client, _ = tab_client(logdir)
    listing = get_json(client, "/runs")
    rows = {r["run"]: r for r in listing["runs"]}
    assert sorted(rows) == ["compare/off", "fit1"]
    on_disk = json.load(open(logdir / "fit1" / REPORT_FILE))
    assert rows["fit1"]["compilation_count"] == on_disk["compilation_count"]
    assert rows["fit1"]["compile_seconds"] == on_disk["compile_seconds"]
    assert rows["fit1"]["steady_step_seconds"] == on_disk["steady_step_seconds"]
    assert rows["compare/off"]["total_compilations"] == 0 and rows["fit1"]["message"] is None
    assert isinstance(listing["profile_tab"], bool)


def test_the_report_route_matches_the_report_file(logdir):
    client, _ = tab_client(logdir)
    view = get_json(client, "/report?run=fit1")
    on_disk = json.load(open(logdir / "fit1" / REPORT_FILE))
    assert [(r["step"], r["seconds"], r["source"]) for r in view["ledger"]] == [
        (c["step"], c["seconds"], c["source"]) for c in on_disk["compilations"]
    ]
    assert view["status"]["jit_reason"] == on_disk["jit_reason"]
    assert [r["changed"] for r in view["ledger"]] == ["first signature", "x axis 1: 80 → 81", "x axis 1: 81 → 82"]
    assert view["storms"][0]["fix_code"] == on_disk["storms"][0]["fix"]["code"]
    assert get_json(client, "/compiles?run=fit1")["ledger"] == view["ledger"]
    assert get_json(client, "/storms?run=fit1")["storms"] == view["storms"]


def test_the_report_route_against_a_baseline_run(tmp_path):
    write_run(tmp_path / "main", sample_report(n_compiles=2))  # x lengths 80, 81
    write_run(tmp_path / "branch", sample_report(n_compiles=4))  # 80 .. 83
    client, _ = tab_client(tmp_path)
    view = get_json(client, "/report?run=branch&baseline=main")
    assert view["baseline"]["new"] == [3, 4]  # the ledger's rows of lengths 82 and 83
    assert view["baseline"]["gone"] == []
    back = get_json(client, "/report?run=main&baseline=branch")["baseline"]
    assert back["new"] == [] and [g["signature"] for g in back["gone"]] == [
        "x:int32[8,82] y:float32[8,1]",
        "x:int32[8,83] y:float32[8,1]",
    ]
    assert "baseline" not in get_json(client, "/report?run=branch")
    error = get_json(client, "/report?run=branch&baseline=nope", status=404)["error"]
    assert "no run 'nope' in this logdir; runs: " in error and "'main'" in error


def test_the_steps_route_serves_the_step_time_lane(logdir):
    client, _ = tab_client(logdir)
    lanes = get_json(client, "/steps?run=fit1")["lanes"]
    points = lanes["train"]["step_time_ms"]
    assert [p[0] for p in points] == list(range(1, 31))
    assert points[0][1] == pytest.approx(2.1)


@pytest.mark.parametrize("files_before", [0, 9, 99])  # the two files' counters cross 9 -> 10, 99 -> 100
def test_the_latest_report_wins(tmp_path, monkeypatch, files_before):
    import itertools

    from xla_keras.tensorboard.sink import LocalEventFile

    monkeypatch.setattr(LocalEventFile, "_ids", itertools.count(files_before))
    write_run(tmp_path / "fit1", sample_report(n_compiles=2), steps=10)
    write_run(tmp_path / "fit1", sample_report(n_compiles=5), steps=20)  # a later flush, a later event file
    client, _ = tab_client(tmp_path)
    assert len(get_json(client, "/report?run=fit1")["ledger"]) == 5


def test_a_run_at_the_logdirs_root_is_dot(tmp_path):
    write_run(tmp_path, sample_report())
    client, _ = tab_client(tmp_path)
    assert [r["run"] for r in get_json(client, "/runs")["runs"]] == ["."]
    assert len(get_json(client, "/report?run=.")["ledger"]) == 3


@pytest.mark.parametrize(
    "query, status",
    [
        ("", 400),
        ("?run=", 400),
        ("?run=nope", 404),
        ("?run=../../etc/passwd", 404),
        ("?run=/etc/passwd", 404),
        ("?run=fit1/../../../etc/passwd", 404),
        ("?run=%2e%2e%2f%2e%2e%2fetc%2fpasswd", 404),
        ("?run=fit1%00", 404),
        ("?run=fit1/train", 404),
        ("?run=" + "a" * 10000, 404),
    ],
)
@pytest.mark.parametrize("route", ["/report", "/compiles", "/storms", "/steps"])
def test_run_arguments_outside_the_listed_runs_are_refused(logdir, route, query, status):
    client, _ = tab_client(logdir)
    code, body = get(client, route + query)
    assert code == status
    error = json.loads(body)["error"]
    assert "root:" not in error and len(error) < 1000
    if status == 404:
        assert "'fit1'" in error  # names the valid choices


@pytest.mark.parametrize(
    "path",
    [
        "/static/../plugin.py",
        "/static/%2e%2e/plugin.py",
        "/static/..%2fplugin.py",
        "/static/..%2f..%2fsetup.cfg",
        "/static/",
        "/static/index.js/..",
        "/static//etc/passwd",
        "/static/%2fetc%2fpasswd",
        "/static/views.py",
        "/static/static/index.js",
        "/static/INDEX.JS",
    ],
)
def test_the_static_route_serves_only_its_two_files(logdir, path):
    client, _ = tab_client(logdir)
    code, body = get(client, path)
    assert code == 404, body[:200]
    assert b"import" not in body and b"root:" not in body


def test_the_static_files_are_served_with_their_types(logdir):
    client, _ = tab_client(logdir)
    for name, kind in (("index.js", "javascript"), ("style.css", "text/css")):
        response = client.get(f"{PREFIX}/static/{name}")
        assert response.status_code == 200 and kind in response.headers["Content-Type"]
    body = client.get(f"{PREFIX}/static/index.js").get_data()
    assert b"export async function render" in body
    assert b"http://" not in body.replace(b"http://www.w3.org/2000/svg", b"")  # no network beyond TensorBoard
    assert b"https://" not in body


def test_an_empty_logdir_lists_no_runs_and_the_tab_is_inactive(tmp_path):
    client, plugin = tab_client(tmp_path)
    assert get_json(client, "/runs")["runs"] == []
    listing = json.loads(client.get("/data/plugins_listing").get_data())
    assert listing[PLUGIN_NAME]["enabled"] is False and listing[PLUGIN_NAME]["tab_name"] == "XLA"


def test_the_tab_is_active_when_a_run_holds_our_data(logdir):
    client, _ = tab_client(logdir)
    listing = json.loads(client.get("/data/plugins_listing").get_data())
    assert listing[PLUGIN_NAME]["enabled"] is True
    assert listing[PLUGIN_NAME]["loading_mechanism"]["module_path"] == f"{PREFIX}/static/index.js"


def _write_raw_report_data(run_dir, payload):
    writers = SummaryWriters(str(run_dir))
    from tensorboard.compat.proto.summary_pb2 import DATA_CLASS_TENSOR, Summary, SummaryMetadata

    from xla_keras.tensorboard.metadata import PLUGIN_CONTENT
    from xla_keras.tensorboard.sink import _string_tensor

    metadata = SummaryMetadata(
        plugin_data=SummaryMetadata.PluginData(plugin_name=PLUGIN_NAME, content=PLUGIN_CONTENT),
        data_class=DATA_CLASS_TENSOR,
    )
    writers._event("train", 1, Summary.Value(tag=TAG_REPORT_DATA, metadata=metadata, tensor=_string_tensor(payload)))
    writers.close()


@pytest.mark.parametrize(
    "payload, words",
    [
        (b"garbage", "not gzip"),
        (gzip.compress(b"{half a json", mtime=0), "not JSON"),
        (gzip.compress(b'{"hello": 1}', mtime=0), "not an XlaMonitor report"),
        (gzip.compress(b"[1, 2, 3]", mtime=0), "JSON list"),
    ],
)
def test_malformed_report_data_renders_a_message_not_an_error(tmp_path, payload, words):
    write_run(tmp_path / "good", sample_report())
    _write_raw_report_data(tmp_path / "bad", payload)
    client, _ = tab_client(tmp_path)
    rows = {r["run"]: r for r in get_json(client, "/runs")["runs"]}
    assert words in rows["bad"]["message"] and rows["good"]["message"] is None
    view = get_json(client, "/report?run=bad")
    assert words in view["message"]
    assert get_json(client, "/compiles?run=bad")["message"] == view["message"]


@pytest.mark.parametrize(
    "report, words",
    [
        ({"jit_mode": "on", "storms": [{"phase": "train", "step": 3}]}, "malformed"),
        ({"jit_mode": "on", "compilations": [{"phase": "train", "step": 1, "signature": 5}]}, "malformed"),
        ({"jit_mode": "on", "compile_seconds": "1.5"}, "compile_seconds is '1.5', not a number"),
        ({"jit_mode": "on", "compilation_count": {"train": "3"}}, "compilation_count['train']"),
        (
            {"jit_mode": "on", "storms": [{"phase": "train", "step": 3, "count": 4, "compile_seconds": "x"}]},
            "storms[0].compile_seconds",
        ),
    ],
)
def test_a_damaged_report_is_a_message_for_its_run_and_the_others_still_show(tmp_path, report, words):
    from xla_keras.tensorboard.metadata import encode_report_data

    write_run(tmp_path / "good", sample_report())
    _write_raw_report_data(tmp_path / "bad", encode_report_data(report))
    client, _ = tab_client(tmp_path)
    rows = {r["run"]: r for r in get_json(client, "/runs")["runs"]}
    assert words in rows["bad"]["message"] and rows["good"]["message"] is None
    for route in ("/report", "/compiles", "/storms"):
        assert words in get_json(client, f"{route}?run=bad")["message"]


def test_a_report_holding_nan_is_a_message_for_its_run_not_a_server_error(tmp_path):
    """Strict JSON refuses NaN: the route answers with a message for that run (status 200), as for
    any damaged report, never a 500."""
    from xla_keras.tensorboard.metadata import encode_report_data

    report = {"jit_mode": "on", "storms": [{"phase": "train", "step": 3, "count": 4, "compile_seconds": float("nan")}]}
    _write_raw_report_data(tmp_path / "bad", encode_report_data(report))
    client, _ = tab_client(tmp_path)
    for route in ("/report", "/storms"):
        view = get_json(client, f"{route}?run=bad")
        assert view["run"] == "bad" and "Out of range float" in view["message"]


def test_a_report_written_mid_fit_or_after_an_interruption_says_so(tmp_path):
    running = sample_report()
    running.run_state = "running"
    write_run(tmp_path / "live", running, steps=7)
    stopped = sample_report()
    stopped.run_state = "interrupted"
    stopped.notes = ["the last fit stopped early (an exception or Ctrl-C) after train step 9: the report holds ..."]
    write_run(tmp_path / "stopped", stopped)
    write_run(tmp_path / "done", sample_report())
    client, _ = tab_client(tmp_path)
    live = get_json(client, "/report?run=live")
    assert "written while the fit was running (at train step 7)" in live["messages"][0]
    assert live["written"]["step"] == 7
    assert get_json(client, "/report?run=stopped")["messages"][0].startswith("Interrupted: the last fit stopped")
    assert get_json(client, "/report?run=done")["messages"] == []


def test_a_run_with_xla_scalars_but_no_report_says_why(tmp_path):
    sink = OutputSink(str(tmp_path / "old"))  # xla_keras 0.1 wrote scalars and no tab data
    sink.scalars([Scalar("train", TAG_STEP_TIME, 2.0, 1)])
    sink.close()
    client, _ = tab_client(tmp_path)
    rows = get_json(client, "/runs")["runs"]
    assert rows[0]["run"] == "old" and "no report for the tab" in rows[0]["message"]
    assert "xla-keras report" in get_json(client, "/report?run=old")["message"]


def test_a_partially_written_event_file_serves_what_was_complete(tmp_path):
    write_run(tmp_path / "fit1", sample_report(n_compiles=2), steps=10)
    write_run(tmp_path / "fit1", sample_report(n_compiles=4), steps=20)
    newest = sorted(os.listdir(tmp_path / "fit1" / "train"))[-1]
    path = tmp_path / "fit1" / "train" / newest
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 200])  # the process died mid-write
    client, _ = tab_client(tmp_path)
    view = get_json(client, "/report?run=fit1")
    assert len(view["ledger"]) in (2, 4)  # the last complete report
    assert get_json(client, "/runs")["runs"][0]["run"] == "fit1"


def test_the_report_summary_is_written_at_epoch_ends_and_at_most_every_ten_seconds_between(tmp_path):
    """The event file grows by a bounded amount during a storm (flushes every second)."""
    now = [0.0]
    sink = OutputSink(str(tmp_path), clock=lambda: now[0])
    report = sample_report()
    written = []
    real = SummaryWriters.report_data
    SummaryWriters.report_data = lambda self, d, step: written.append(step) or real(self, d, step)
    try:
        for second in range(25):  # a storm: the report file is replaced every second
            now[0] = float(second)
            sink.flush(report=lambda: report, step=second)
        now[0] = 25.5
        sink.flush(report=lambda: report, text=True, step=26)  # an epoch end
    finally:
        SummaryWriters.report_data = real
        sink.close()
    assert written == [0, 10, 20, 26]


def test_big_runs_open_fast_and_the_overflow_is_counted(tmp_path):
    """20,000 steps, 1,000 compiles: the routes answer in well under a second of backend time
    (benchmarks/tab_backend.py measures it; here a loose bound that catches a pathology)."""
    import time

    report = sample_report(n_compiles=1000, steps=20000)
    report.compilations_dropped = 50
    write_run(tmp_path / "big", report, steps=20000)
    client, _ = tab_client(tmp_path)
    start = time.perf_counter()
    view = get_json(client, "/report?run=big")
    get_json(client, "/steps?run=big")
    assert time.perf_counter() - start < 5.0
    assert len(view["ledger"]) == 1000 and "50 more compiles" in view["messages"][0]
