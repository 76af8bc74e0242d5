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
* ``/report?run=R[&baseline=B]`` - everything for one run (``views.run_view``); with a baseline run,
  its ledger against B's (``views.against_baseline``).
* ``/compiles?run=R``, ``/storms?run=R`` - the ledger, the storm cards.
* ``/steps?run=R`` - step-time scalars per phase lane, for the timeline.
* ``/static/index.js``, ``/static/style.css`` - the frontend (a plain ES module).
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple

from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from xla_keras.core.tags import TAG_STEADY_STEP_TIME, TAG_STEP_TIME
from xla_keras.core.versions import profile_tab_install, profile_tab_installed
from xla_keras.report.schema import ParsedReport
from xla_keras.tensorboard import views
from xla_keras.tensorboard.metadata import (
    PLUGIN_CONTENT,
    PLUGIN_NAME,
    TAG_REPORT_DATA,
    content_version,
    decode_report_data,
)

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


class RunReport(NamedTuple):
    """A run's latest report: the dict, parsed once, and when it was written (``{"step", "wall_time"}``)."""

    report: Dict[str, Any]
    parsed: ParsedReport
    written: Dict[str, Any]


class XlaPlugin(base_plugin.TBPlugin):
    """The "XLA" tab: compile ledger, shape changes, storms with their fix, the cost.

    Each route (``*_route``, HTTP) hands the request's context, experiment and run to its ``*_impl``,
    which returns the JSON body, as TensorBoard's own plugins do."""

    plugin_name = PLUGIN_NAME

    def __init__(self, context):
        self._provider = context.data_provider
        self._reports: "OrderedDict[Tuple[str, int, float], RunReport]" = OrderedDict()
        self._lock = threading.Lock()

    def get_plugin_apps(self):
        return {
            "/runs": self.runs_route,
            "/report": self.report_route,
            "/compiles": self.compiles_route,
            "/storms": self.storms_route,
            "/steps": self.steps_route,
            "/static/*": self.static_route,
        }

    def is_active(self):
        return False  # TensorBoard activates the tab when the provider lists data of data_plugin_names()

    def data_plugin_names(self):
        return (PLUGIN_NAME,)

    def frontend_metadata(self):
        return base_plugin.FrontendMetadata(es_module_path="/static/index.js", tab_name="XLA")

    # ------------------------------------------------------------ reading

    def _runs(self, ctx, experiment) -> Dict[str, Dict[str, Any]]:
        """The tab's runs: {run: {"tensorboard_run", "series" (None: XLA scalars but no report)}}."""
        from tensorboard.data import provider

        found: Dict[str, Dict[str, Any]] = {}
        with_report = (
            self._provider.list_tensors(
                ctx,
                experiment_id=experiment,
                plugin_name=PLUGIN_NAME,
                run_tag_filter=provider.RunTagFilter(tags=[TAG_REPORT_DATA]),
            )
            or {}
        )
        for tb_run, tags in with_report.items():
            run = views.tab_run(tb_run)
            if run is not None and TAG_REPORT_DATA in tags:
                found[run] = {"tensorboard_run": tb_run, "series": tags[TAG_REPORT_DATA]}
        scalars = self._provider.list_scalars(ctx, experiment_id=experiment, plugin_name="scalars") or {}
        for tb_run, tags in scalars.items():
            run = views.tab_run(tb_run)
            if run is not None and run not in found and any(t.startswith("xla/") for t in tags):
                found[run] = {"tensorboard_run": views.tensorboard_run(run), "series": None}
        return dict(sorted(found.items()))

    def _report(self, ctx, experiment, info: Dict[str, Any]) -> RunReport:
        """The run's latest report, decoded and parsed once per version; ValueError if unreadable."""
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
        if content_version(content) > content_version(PLUGIN_CONTENT):
            raise ValueError(
                "the report was written by a newer xla_keras (its tab data format is newer "
                "than this one reads): upgrade xla_keras where TensorBoard runs"
            )
        from tensorboard.data import provider

        data = self._provider.read_tensors(
            ctx,
            experiment_id=experiment,
            plugin_name=PLUGIN_NAME,
            downsample=1,
            run_tag_filter=provider.RunTagFilter(runs=[info["tensorboard_run"]], tags=[TAG_REPORT_DATA]),
        )
        datums = (data.get(info["tensorboard_run"]) or {}).get(TAG_REPORT_DATA) or []
        if not datums:
            raise ValueError("the run's report summary holds no data yet")
        value = datums[-1].numpy
        raw = value.item() if hasattr(value, "item") and getattr(value, "size", 0) == 1 else value
        report = decode_report_data(raw)
        parsed = views.parse_checked(report)  # ValueError for what is not a report, before any use
        found = RunReport(report, parsed, {"step": int(datums[-1].step), "wall_time": float(datums[-1].wall_time)})
        with self._lock:
            self._reports[key] = found
            while len(self._reports) > _CACHED_REPORTS:
                self._reports.popitem(last=False)
        return found

    def _with_report(self, ctx, experiment, run: Optional[str], build: Callable[[str, RunReport], Any]) -> Any:
        """``build(run, report)`` for the requested run; RunError for a bad ``run``, a message for a bad report."""
        runs = self._runs(ctx, experiment)
        run = _run_argument(run, runs)
        try:
            return build(run, self._report(ctx, experiment, runs[run]))
        except MALFORMED as error:
            return {"run": run, "message": _malformed(error)}

    # ------------------------------------------------------------- what each route serves

    def runs_impl(self, ctx, experiment) -> Dict[str, Any]:
        rows = []
        for run, info in self._runs(ctx, experiment).items():
            try:
                loaded = self._report(ctx, experiment, info)
                rows.append(dict(views.summary_row(run, loaded.report), message=None, written=loaded.written))
            except MALFORMED as error:
                rows.append({"run": run, "message": _malformed(error)})
        return {"runs": rows, "profile_tab": _profile_tab_installed(), "profile_install": _profile_install_line()}

    def report_impl(self, ctx, experiment, run: Optional[str], baseline: Optional[str] = None) -> Dict[str, Any]:
        view = self._with_report(
            ctx,
            experiment,
            run,
            lambda run, loaded: views.run_view(run, loaded.report, loaded.written, loaded.parsed),
        )
        if baseline and "ledger" in view:  # the ledger against another run's (a RunError names the runs)
            runs = self._runs(ctx, experiment)
            baseline = _run_argument(baseline, runs)
            try:
                theirs = self._report(ctx, experiment, runs[baseline]).report
                view["baseline"] = views.against_baseline(view["ledger"], baseline, theirs)
            except MALFORMED as error:
                view["baseline"] = {"run": baseline, "message": _malformed(error)}
        return view

    def compiles_impl(self, ctx, experiment, run: Optional[str]) -> Dict[str, Any]:
        return self._with_report(
            ctx,
            experiment,
            run,
            lambda run, loaded: {
                "run": run,
                "ledger": views.ledger(loaded.report.get("compilations") or []),
                "compilations_dropped": loaded.report.get("compilations_dropped", 0),
            },
        )

    def storms_impl(self, ctx, experiment, run: Optional[str]) -> Dict[str, Any]:
        return self._with_report(
            ctx, experiment, run, lambda run, loaded: {"run": run, "storms": views.storms(loaded.report)}
        )

    def steps_impl(self, ctx, experiment, run: Optional[str]) -> Dict[str, Any]:
        run = _run_argument(run, self._runs(ctx, experiment))
        from tensorboard.data import provider

        wanted = {views.tensorboard_run(run, leaf): phase for phase, leaf in LANES.items()}
        data = self._provider.read_scalars(
            ctx,
            experiment_id=experiment,
            plugin_name="scalars",
            downsample=STEP_POINTS,
            run_tag_filter=provider.RunTagFilter(runs=list(wanted), tags=[TAG_STEP_TIME, TAG_STEADY_STEP_TIME]),
        )
        lanes = {}
        for tb_run, tags in (data or {}).items():
            lanes[wanted[tb_run]] = {
                tag.split("/", 1)[1]: [[d.step, d.value] for d in points] for tag, points in tags.items()
            }
        return {"run": run, "lanes": lanes}

    # ------------------------------------------------------------- routes

    @wrappers.Request.application
    def runs_route(self, request):
        return _json(self.runs_impl(*_ids(request)))

    @wrappers.Request.application
    def report_route(self, request):
        baseline = request.args.get("baseline")
        return _run_route(request, lambda ctx, experiment, run: self.report_impl(ctx, experiment, run, baseline))

    @wrappers.Request.application
    def compiles_route(self, request):
        return _run_route(request, self.compiles_impl)

    @wrappers.Request.application
    def storms_route(self, request):
        return _run_route(request, self.storms_impl)

    @wrappers.Request.application
    def steps_route(self, request):
        return _run_route(request, self.steps_impl)

    @wrappers.Request.application
    def static_route(self, request):
        name = request.path.partition(f"/{PLUGIN_NAME}/static/")[2]
        if name not in STATIC_FILES:  # a fixed list: no path from a request ever reaches open()
            return _json({"error": f"no static file {name[:200]!r}; files: {sorted(STATIC_FILES)}"}, 404)
        with open(os.path.join(STATIC_DIR, name), "rb") as f:
            body = f.read()
        from tensorboard.backend import http_util

        return http_util.Respond(request, body, STATIC_FILES[name])


# What reading a damaged report can raise: every one becomes a message for that run, never a 500.
MALFORMED = (ValueError, TypeError, KeyError, AttributeError, IndexError)


def _ids(request) -> Tuple[Any, str]:
    """The request's context and experiment id, as TensorBoard's data provider takes them."""
    from tensorboard import plugin_util

    return plugin_util.context(request.environ), plugin_util.experiment_id(request.environ)


def _run_route(request, impl: Callable[[Any, str, Optional[str]], Dict[str, Any]]):
    run = request.args.get("run")
    try:
        body = impl(*_ids(request), run)
    except RunError as error:
        return _json({"error": str(error)}, error.code)
    try:
        return _json(body)
    except MALFORMED as error:  # e.g. a NaN in a damaged report: strict JSON refuses it
        return _json({"run": run, "message": _malformed(error)})


def _run_argument(run: Optional[str], runs: Dict[str, Any]) -> str:
    if run is None or run == "":
        raise RunError(400, "missing the run argument: ?run=<one of /runs>")
    if len(run) > MAX_RUN_ARGUMENT or run not in runs:
        shown = ", ".join(repr(r) for r in list(runs)[:20]) or "none yet"
        raise RunError(404, f"no run {run[:200]!r} in this logdir; runs: {shown}")
    return run


def _malformed(error: Exception) -> str:
    return str(error) if isinstance(error, ValueError) else f"the report is malformed: {error!r}"


def _json(body: Any, code: int = 200):
    return wrappers.Response(
        json.dumps(body, allow_nan=False, default=str),
        status=code,
        content_type="application/json",
        headers={"X-Content-Type-Options": "nosniff"},
    )


def _profile_tab_installed() -> bool:  # a name of this module: tests patch it
    return profile_tab_installed()


def _profile_install_line() -> Optional[str]:
    if _profile_tab_installed():
        return None
    try:
        return profile_tab_install()
    except Exception:  # noqa: BLE001 - no TensorFlow where TensorBoard runs: the general line
        return "pip install tensorboard-plugin-profile"
