"""One report per model: what a report is made of, and the book of them a monitor keeps. No TensorFlow.

A monitor may see several models (a notebook that builds a second one, a
script that fits a teacher then a student). Their counts must never merge: each
model gets a ``ModelReport`` (its session, output sink, trace windows, probe
and JIT read-back), the first in the monitor's ``log_dir`` and the N-th in
``log_dir/model_N``. A model watched again resumes its own report. A
re-compiled model is the same model object, so the same report.
"""

from __future__ import annotations

import os
import weakref
from typing import Any, Callable, Dict, List, Optional

from xla_keras.backends.base import Backend, CompileProbe
from xla_keras.callback.cost_card import CostMeter
from xla_keras.callback.traces import TraceWindows
from xla_keras.config import MonitorConfig
from xla_keras.core.cache import CacheAccount
from xla_keras.jit.modes import JitState, ProbeFacts
from xla_keras.report.model import XlaReport
from xla_keras.session.build import ReportContext, build_report
from xla_keras.session.session import Session
from xla_keras.tensorboard.sink import OutputSink


class ModelReport:
    """Everything one model's report is made of."""

    def __init__(
        self,
        config: MonitorConfig,
        log_dir: Optional[str],
        backend: Backend,
        missing_viewer: Callable[[], Optional[str]],
    ):
        self.backend = backend
        self.session = Session(
            config, between_drains=backend.ends_calls_in_wrapper, probe_budget=not backend.probes_every_call
        )
        self.sink = OutputSink(log_dir)
        self.traces = TraceWindows(config.profile, backend, self.session.notes, missing_viewer, self.session.own_work)
        self.error: Optional[str] = None  # why the monitor disabled itself, if it did
        self.probe: Optional[CompileProbe] = None  # the backend's compile probe, made at the first call
        self.jit_state = JitState(config.jit)  # the read-back of the function that runs
        self.cache: Optional[dict] = None  # the persistent compilation cache, if any
        self.cache_account = CacheAccount(None, "", config.jit)
        self.state: Optional[str] = None  # "finished" / "interrupted" once a call has ended
        self.stopped: Optional[str] = None  # where the last interrupted call stopped, in words
        self.processes: List[Dict[str, Any]] = []  # several processes: each one's counts (callback/agreement.py)
        self.costs = CostMeter(config.cost, config.peak_flops, backend, self.session.notes)
        self.layer_names: List[str] = []  # the model's layers (auto-clustering: the coverage names them)
        self._coverage: Optional[Dict[str, Any]] = None
        self._coverage_read: Optional[str] = None  # the session dir the coverage was read from

    def coverage(self) -> Optional[Dict[str, Any]]:
        """Auto-clustering's coverage of the train step, read once from the steady trace window (when one
        was saved while auto-clustering ran): ``jit/coverage.py``."""
        window = self.traces.steady_session
        if window is None or window[0] == self._coverage_read or not self.jit_state.autoclustering:
            return self._coverage
        self._coverage_read, steps = window
        try:
            self._coverage = self.backend.trace_coverage(window[0], self.layer_names, steps)
        except Exception as error:  # noqa: BLE001 - a figure withheld, never a failed fit
            self.session.notes.add_once("coverage", f"the trace window's coverage could not be read: {error!r}")
        return self._coverage

    def ended(self, interrupted: Optional[str] = None) -> None:
        """A watched call ended: normally, or (``interrupted``: where, in words) by an exception."""
        self.state = "interrupted" if interrupted else "finished"
        self.stopped = interrupted

    def build(self, jit_mode: str, refused: Optional[str], versions: dict, running: bool = False) -> XlaReport:
        notes = []
        if self.state == "interrupted" and self.stopped and not running:
            notes.append(self.stopped)
        if self.cache and not self.cache["effective"]:
            notes.append(
                f"the persistent compilation cache at {self.cache['dir']} was configured too late for "
                "this process (after TensorFlow read its flags): nothing is cached or loaded. Fix: "
                "xla_keras.configure(cache_dir=...) right after import, before any model is built, or "
                "TF_XLA_FLAGS=--tf_xla_persistent_cache_directory=DIR at start"
            )
        account = self.cache_account
        if account.loads_unknown:
            notes.append(
                f"{account.loads_unknown} executable(s) came from the persistent cache with no fresh "
                "compile time on record, so what they saved is not counted"
            )
        if self.error:
            notes.append(self.error)
        return build_report(
            self.session.snapshot(),
            ReportContext(
                jit_mode=jit_mode,
                jit_state=self.jit_state,
                probe=self.probe.facts if self.probe is not None else ProbeFacts(),
                traces=tuple(self.traces.saved),
                cache_saved_seconds=account.saved_seconds if account.loads_known else None,
                extra_notes=tuple(notes),
                refused=refused,
                log_dir=self.sink.log_dir if self.sink.writes and not refused else None,
                versions=versions,
                run_state="running" if running else self.state,
                backend=self.backend.name,
                other_compilations=self.backend.compiles_outside_steps(self.probe) if self.probe is not None else {},
                processes=tuple(self.processes),
                costs=self.costs.rates(self.session.phases),
                coverage=self.coverage(),
            ),
        )


class ReportBook:
    """The reports of one monitor, one per model, in the order the models were first seen."""

    def __init__(self, make: Callable[[Optional[str]], ModelReport], log_dir: Optional[str]):
        self._make = make
        self._log_dir = log_dir
        self._entries: List[tuple] = []  # (the model, weakly; its report); the current one last
        self._order: List[ModelReport] = []  # the reports in the order their models were first seen
        self.current: ModelReport = make(log_dir)

    def watch(self, model: Any) -> bool:
        """Make ``model``'s report the current one; True when it is a model not seen before and
        not the first (a new report, with files of its own)."""
        if self._entries and self._entries[-1][0]() is model:
            return False
        known = next((entry for entry in self._entries if entry[0]() is model), None)
        if self._entries:
            self.current.sink.close()  # reopened lazily if that model comes back
        if known is not None:
            self._entries.remove(known)
            self._entries.append(known)
            self.current = known[1]
            return False
        new = bool(self._entries)
        if new:
            n = len(self._entries) + 1
            self.current = self._make(None if self._log_dir is None else os.path.join(self._log_dir, f"model_{n}"))
        self._entries.append((weakref.ref(model), self.current))
        self._order.append(self.current)
        return new

    def all(self) -> List[ModelReport]:
        """Every model's report, in the order the models were first seen."""
        return list(self._order) or [self.current]
