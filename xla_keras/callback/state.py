"""What the monitor's parts share: the arguments, the backend, the reports and where the call stands.

One ``CallState`` per monitor, handed to every part in ``callback/`` (the step path, the lifecycle,
the storm action, jit='fastest', error containment), so that no part reads another's private
attributes. No TensorFlow: the framework sits behind ``backend``.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Protocol, Set

from xla_keras.backends.base import Backend, CompileProbe, Distribution, StepObserver
from xla_keras.callback.fastest_run import FastestRun
from xla_keras.callback.guards import Guarded
from xla_keras.callback.reports import ModelReport, ReportBook
from xla_keras.config import MonitorConfig
from xla_keras.report.model import XlaReport
from xla_keras.session.session import Session
from xla_keras.tensorboard.sink import OutputSink

RUN_WORD = {"train": "fit", "test": "evaluation", "predict": "prediction"}


class Monitor(StepObserver, Guarded, Protocol):
    """What the parts use of the monitor itself: the step wrappers' observer, guarded."""


class CallState:
    """Shared by the monitor's parts; the monitor (``observer``) is what the step wrappers call.

    A flag one part alone reads and writes lives in that part (the step path's running probe, the
    lifecycle's due summary); those here are read by several, and each comment names who writes it."""

    def __init__(self, config: MonitorConfig, backend: Backend, book: ReportBook, observer: Monitor):
        self.config = config
        self.backend = backend
        self.book = book
        self.observer = observer
        self.ends_in_wrapper = bool(backend.ends_calls_in_wrapper)
        self.dist = Distribution()
        self.enabled = True  # False once disabled (Containment) or refused (Lifecycle): the hooks do nothing
        self.observing = True  # False after an internal error under multi-worker (Containment.disable)
        self.refused: Optional[str] = None  # why this monitor cannot observe here (Lifecycle.refuse)
        self.skipping = False  # this call's model is refused: its hooks do nothing (Lifecycle)
        self.in_fit = False  # a fit is running (Lifecycle)
        self.in_cleanup = False  # ending calls after an ended or failed one (cleaning): storms reported only
        self.fastest: Optional[FastestRun] = None  # jit='fastest': its trial (FastestDriver; Containment clears)
        self.precompile_due: Set[str] = set()  # phases still to precompile (set by Lifecycle, spent by Precompiler)
        # precompile='auto': the log dir's last report, per phase, read by Lifecycle before the call writes its own
        self.precompile_previous: Optional[dict] = None

    def speaks(self) -> bool:
        """Whether the monitor prints what it decided (the jit line, the end-of-fit summary): only when
        both ``XlaMonitor(verbose=...)`` and the running call's ``verbose`` (Keras's public
        ``Callback.params``) allow it. Warnings are problems: they are not subject to this."""
        call_verbose = (self.observer.params or {}).get("verbose", 1)
        return bool(self.config.verbose) and call_verbose != 0

    # The current model's report, and its parts (book.ModelReport).
    @property
    def current(self) -> ModelReport:
        return self.book.current

    @property
    def session(self) -> Session:
        return self.book.current.session

    @property
    def sink(self) -> OutputSink:
        return self.book.current.sink

    @property
    def probe(self) -> Optional[CompileProbe]:
        return self.book.current.probe

    @property
    def model(self) -> Any:
        """The model of the watched call, read without syncing Keras's JAX state (see XlaMonitor.model)."""
        return self.backend.callback_model(self.observer)

    @property
    def in_call(self) -> bool:
        """A fit (or a standalone evaluate / predict) is being watched and has not ended."""
        return self.in_fit or bool(self.backend.wrapped_phases())

    def report(self) -> XlaReport:
        """The current model's report so far."""
        return self.current.build(self.config.jit, self.refused, self.backend.versions(), running=self.in_call)

    def reports(self) -> List[XlaReport]:
        """Every model's report, in the order the models were first seen."""
        versions, running = self.backend.versions(), self.in_call
        return [
            r.build(self.config.jit, self.refused, versions, running=r is self.current and running)
            for r in self.book.all()
        ]

    def flush(self, report: bool = True, text: bool = False) -> None:
        session = self.session
        began = session.clock()
        try:
            self.sink.flush(report=self.report if report else None, text=text, step=session.phases["train"].step)
        finally:
            session.own_work("writes", session.clock() - began)

    def stopped_early(self, phase: str, in_fit: bool, why: str = "an exception or Ctrl-C") -> str:
        return (
            f"the last {'fit' if in_fit else RUN_WORD.get(phase, phase)} stopped early ({why}) after {phase} "
            f"step {self.session.phases[phase].step}: the report holds what ran before"
        )

    def cleaning(self, work: Callable[[], None]) -> None:
        """Run ``work`` as cleanup: a storm it finds is reported, never acted on (it would raise into the
        next fit, or switch XLA off for it)."""
        self.in_cleanup = True
        try:
            work()
        finally:
            self.in_cleanup = False
