"""The XLA tab's backend: a TensorBoard dynamic plugin.

Registered through the ``tensorboard_plugins`` entry point (setup.cfg), as
TensorBoard's ``example_raw_scalars`` is. Everything is read through the data
provider TensorBoard gives plugins, never from files named in a request: a
``run`` argument is only ever looked up among the runs the provider lists, and
the static route serves two fixed files, so no request can read a file outside
the logdir (or inside it, for that matter).

Routes (under ``/data/plugin/xla_keras``), all JSON but the static files:

* ``/runs`` - the tab's runs (one per monitor log dir; ``compare()`` writes one
  per mode) with a compare-view summary each, and whether the Profile tab is
  installed.
* ``/report?run=R`` - everything for one run (``views.run_view``).
* ``/compiles?run=R``, ``/storms?run=R`` - the ledger, the storm cards.
* ``/steps?run=R`` - step-time scalars per phase lane, for the timeline.
* ``/static/index.js``, ``/static/style.css`` - the frontend (a plain ES module).
"""

from __future__ import annotations

import importlib.util
import json
import os
import threading
from collections import OrderedDict
from typing import Any, Dict, Optional, Tuple

from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from xla_keras.report.schema import (
    PLUGIN_CONTENT,
    PLUGIN_NAME,
    TAG_REPORT_DATA,
    TAG_STEADY_STEP_TIME,
    TAG_STEP_TIME,
    decode_report_data,
)
from xla_keras.tensorboard import views

STATIC_FILES = {"index.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8"}
STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
MAX_RUN_ARGUMENT = 4096
STEP_POINTS = 2000  # step-time points per lane (TensorBoard samples long series anyway)
_CACHED_REPORTS = 64
LANES = {"train": views.TRAIN_RUN, "test": views.VALIDATION_RUN}


class RunError(Exception):
    """A request names no run, or one the logdir does not hold (-> 400 / 404 with the valid choices)."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


class XlaPlugin(base_plugin.TBPlugin):
    """The "XLA" tab: compile ledger, shape changes, storms with their fix, the cost."""

    plugin_name = PLUGIN_NAME

    def __init__(self, context):
        self._provider = context.data_provider
        self._reports: "OrderedDict[Tuple[str, int, float], Any]" = OrderedDict()
        self._lock = threading.Lock()

    def get_plugin_apps(self):
        return {
            "/runs": self._serve_runs,
            "/report": self._serve_report,
            "/compiles": self._serve_compiles,
            "/storms": self._serve_storms,
            "/steps": self._serve_steps,
            "/static/*": self._serve_static,
        }

    def is_active(self):
        return False  # TensorBoard activates the tab when the provider lists data of data_plugin_names()

    def data_plugin_names(self):
        return (PLUGIN_NAME,)

    def frontend_metadata(self):
        return base_plugin.FrontendMetadata(es_module_path="/static/index.js", tab_name="XLA")

    # ------------------------------------------------------------ reading

    def _ids(self, request):
        from tensorboard import plugin_util

        return plugin_util.context(request.environ), plugin_util.experiment_id(request.environ)

    def _runs(self, request) -> Dict[str, Dict[str, Any]]:
        """The tab's runs: {run: {"tensorboard_run", "series" (None: XLA scalars but no report)}}."""
        ctx, eid = self._ids(request)
        from tensorboard.data import provider

        found: Dict[str, Dict[str, Any]] = {}
        with_report = (
            self._provider.list_tensors(
                ctx,
                experiment_id=eid,
                plugin_name=PLUGIN_NAME,
                run_tag_filter=provider.RunTagFilter(tags=[TAG_REPORT_DATA]),
            )
            or {}
        )
        for tb_run, tags in with_report.items():
            run = views.tab_run(tb_run)
            if run is not None and TAG_REPORT_DATA in tags:
                found[run] = {"tensorboard_run": tb_run, "series": tags[TAG_REPORT_DATA]}
        scalars = self._provider.list_scalars(ctx, experiment_id=eid, plugin_name="scalars") or {}
        for tb_run, tags in scalars.items():
            run = views.tab_run(tb_run)
            if run is not None and run not in found and any(t.startswith("xla/") for t in tags):
                found[run] = {"tensorboard_run": views.tensorboard_run(run), "series": None}
        return dict(sorted(found.items()))

    def _run_argument(self, request, runs) -> str:
        run = request.args.get("run")
        if run is None or run == "":
            raise RunError(400, "missing the run argument: ?run=<one of /runs>")
        if len(run) > MAX_RUN_ARGUMENT or run not in runs:
            shown = ", ".join(repr(r) for r in list(runs)[:20]) or "none yet"
            raise RunError(404, f"no run {run[:200]!r} in this logdir; runs: {shown}")
        return run

    def _report(self, request, run: str, info: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        """The run's latest report dict (decoded and checked once per version) and when it was written
        (``{"step", "wall_time"}``); ValueError if unreadable."""
        series = info["series"]
        if series is None:
            raise ValueError(
                "this run has XLA scalars but no report for the tab yet: it was written by "
                "xla_keras 0.1, or the fit was interrupted before the monitor's first flush. "
                "`xla-keras report LOGDIR` reads its xla_report.json"
            )
        key = (info["tensorboard_run"], series.max_step, series.max_wall_time)
        with self._lock:
            if key in self._reports:
                self._reports.move_to_end(key)
                return self._reports[key]
        content = getattr(series, "plugin_content", PLUGIN_CONTENT) or PLUGIN_CONTENT
        if _content_version(content) > _content_version(PLUGIN_CONTENT):
            raise ValueError(
                "the report was written by a newer xla_keras (its tab data format is newer "
                "than this one reads): upgrade xla_keras where TensorBoard runs"
            )
        ctx, eid = self._ids(request)
        from tensorboard.data import provider

        data = self._provider.read_tensors(
            ctx,
            experiment_id=eid,
            plugin_name=PLUGIN_NAME,
            downsample=1,
            run_tag_filter=provider.RunTagFilter(runs=[info["tensorboard_run"]], tags=[TAG_REPORT_DATA]),
        )
        datums = (data.get(info["tensorboard_run"]) or {}).get(TAG_REPORT_DATA) or []
        if not datums:
            raise ValueError("the run's report summary holds no data yet")
        value = datums[-1].numpy
        raw = value.item() if hasattr(value, "item") and getattr(value, "size", 0) == 1 else value
        report = views.check(decode_report_data(raw))  # ValueError for what is not a report, before any use
        found = (report, {"step": int(datums[-1].step), "wall_time": float(datums[-1].wall_time)})
        with self._lock:
            self._reports[key] = found
            while len(self._reports) > _CACHED_REPORTS:
                self._reports.popitem(last=False)
        return found

    # ------------------------------------------------------------- routes

    @wrappers.Request.application
    def _serve_runs(self, request):
        runs = self._runs(request)
        rows = []
        for run, info in runs.items():
            try:
                report, written = self._report(request, run, info)
                rows.append(dict(views.summary(run, report), message=None, written=written))
            except MALFORMED as error:
                rows.append({"run": run, "message": _malformed(error)})
        return _json(
            {"runs": rows, "profile_tab": _profile_tab_installed(), "profile_install": _profile_install_line()}
        )

    def _one_run(self, request, build):
        try:
            runs = self._runs(request)
            run = self._run_argument(request, runs)
        except RunError as error:
            return _json({"error": str(error)}, error.code)
        try:
            return _json(build(run, *self._report(request, run, runs[run])))
        except MALFORMED as error:
            return _json({"run": run, "message": _malformed(error)})

    @wrappers.Request.application
    def _serve_report(self, request):
        return self._one_run(request, views.run_view)

    @wrappers.Request.application
    def _serve_compiles(self, request):
        return self._one_run(
            request,
            lambda run, report, written: {
                "run": run,
                "ledger": views.ledger(report.get("compilations") or []),
                "compilations_dropped": report.get("compilations_dropped", 0),
            },
        )

    @wrappers.Request.application
    def _serve_storms(self, request):
        return self._one_run(request, lambda run, report, written: {"run": run, "storms": views.storms(report)})

    @wrappers.Request.application
    def _serve_steps(self, request):
        try:
            run = self._run_argument(request, self._runs(request))
        except RunError as error:
            return _json({"error": str(error)}, error.code)
        ctx, eid = self._ids(request)
        from tensorboard.data import provider

        wanted = {views.tensorboard_run(run, leaf): phase for phase, leaf in LANES.items()}
        data = self._provider.read_scalars(
            ctx,
            experiment_id=eid,
            plugin_name="scalars",
            downsample=STEP_POINTS,
            run_tag_filter=provider.RunTagFilter(runs=list(wanted), tags=[TAG_STEP_TIME, TAG_STEADY_STEP_TIME]),
        )
        lanes = {}
        for tb_run, tags in (data or {}).items():
            lanes[wanted[tb_run]] = {
                tag.split("/", 1)[1]: [[d.step, d.value] for d in points] for tag, points in tags.items()
            }
        return _json({"run": run, "lanes": lanes})

    @wrappers.Request.application
    def _serve_static(self, request):
        name = request.path.partition(f"/{PLUGIN_NAME}/static/")[2]
        if name not in STATIC_FILES:  # a fixed list: no path from a request ever reaches open()
            return _json({"error": f"no static file {name[:200]!r}; files: {sorted(STATIC_FILES)}"}, 404)
        with open(os.path.join(STATIC_DIR, name), "rb") as f:
            body = f.read()
        from tensorboard.backend import http_util

        return http_util.Respond(request, body, STATIC_FILES[name])


# What reading a damaged report can raise: every one becomes a message for that run, never a 500.
MALFORMED = (ValueError, TypeError, KeyError, AttributeError, IndexError)


def _malformed(error: Exception) -> str:
    return str(error) if isinstance(error, ValueError) else f"the report is malformed: {error!r}"


def _json(body: Any, code: int = 200):
    return wrappers.Response(
        json.dumps(body, allow_nan=False, default=str),
        status=code,
        content_type="application/json",
        headers={"X-Content-Type-Options": "nosniff"},
    )


def _content_version(content: bytes) -> int:
    try:
        return int(json.loads(content.decode("utf-8")).get("version", 1))
    except (ValueError, AttributeError, UnicodeDecodeError):
        return 1


def _profile_tab_installed() -> bool:
    return bool(importlib.util.find_spec("tensorboard_plugin_profile") or importlib.util.find_spec("xprof"))


def _profile_install_line() -> Optional[str]:
    if _profile_tab_installed():
        return None
    try:
        from xla_keras.tools.doctor import profile_tab_install

        return profile_tab_install()
    except Exception:  # noqa: BLE001 - no TensorFlow where TensorBoard runs: the general line
        return "pip install tensorboard-plugin-profile"
