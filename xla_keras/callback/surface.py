"""What an XlaMonitor shows: its arguments (read-only), its reports and the state of its call.

The base of ``XlaMonitor`` (monitor.py), as Keras's ``MonitorCallback`` is the base of
``EarlyStopping``: the monitor's constructor wires ``config``, ``backend`` and ``_state``; this
class only reads them. No hook lives here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Optional

import keras

if TYPE_CHECKING:
    from xla_keras.backends.base import Backend, CompileProbe
    from xla_keras.callback.state import CallState
    from xla_keras.callback.traces import TraceWindows
    from xla_keras.config import MonitorConfig
    from xla_keras.core.session import Session
    from xla_keras.report.model import XlaReport
    from xla_keras.tensorboard.sink import OutputSink


class MonitorSurface(keras.callbacks.Callback):
    """The read-only surface of an ``XlaMonitor``: see ``XlaMonitor`` for what it is."""

    config: MonitorConfig
    backend: Backend
    _state: CallState

    @property
    def async_safe(self) -> bool:
        """Keras may run the batch-end hooks on its executor thread (JAX): calls end in the step wrapper."""
        return self._state.ends_in_wrapper

    @property
    def model(self) -> Any:
        """The model of the watched call.

        Unlike ``keras.callbacks.Callback.model`` it never syncs Keras's JAX training state into the
        model's variables (the monitor reads it inside steps).

        Returns:
            The Keras model of the current (or last) fit / evaluate / predict, or None before any.
        """
        return self.backend.callback_model(self)

    # The arguments, as given (normalised): read-only.
    jit = property(lambda self: self.config.jit)
    storm_threshold = property(lambda self: self.config.storm_threshold)
    storm_window = property(lambda self: self.config.storm_window)
    on_storm = property(lambda self: self.config.on_storm)
    profile = property(lambda self: self.config.profile)
    update_freq = property(lambda self: self.config.update_freq)
    verbose = property(lambda self: self.config.verbose)
    compile_budget = property(lambda self: self.config.compile_budget)
    compile_budget_floor = property(lambda self: self.config.compile_budget_floor)
    max_records = property(lambda self: self.config.max_records)

    @property
    def log_dir(self) -> Optional[str]:
        """Where this report's files go (``LOG_DIR/model_N`` for the N-th model), or None.

        Returns:
            The current model's directory (``~`` expanded), or None with ``log_dir=None``.
        """
        return self.sink.log_dir

    @property
    def error(self) -> Optional[str]:
        """Why the monitor disabled itself (an internal error), or None.

        Returns:
            The error's text (training went on unmonitored), or None while the monitor works.
        """
        return self._state.current.error

    @property
    def in_call(self) -> bool:
        """A fit (or a standalone evaluate / predict) is being watched and has not ended."""
        return self._state.in_call

    def step_wrapper(self, phase: str) -> Any:
        """The wrapper this monitor installed on ``phase``'s step function, if any."""
        return self.backend.wrapper(phase)

    # The current model's report, and its parts (book.ModelReport).
    @property
    def session(self) -> Session:
        return self._state.session

    @property
    def sink(self) -> OutputSink:
        return self._state.sink

    @property
    def traces(self) -> TraceWindows:
        return self._state.current.traces

    @property
    def probe(self) -> Optional[CompileProbe]:
        """The compile probe of the report being written (made at its model's first call), or None."""
        return self._state.probe

    @property
    def report(self) -> XlaReport:
        """The report so far (complete after the fit / evaluate / predict) of the model watched last.

        Returns:
            An ``XlaReport``, built anew at each read (a snapshot: later steps do not change it).

        Example:
            `monitor`: the monitor of XlaMonitor's example, after its fit of 2 batches.

            ```pycon
            >>> monitor.report.steps
            {'train': 2, 'test': 0, 'predict': 0}

            ```
        """
        return self._state.report()

    @property
    def reports(self) -> List[XlaReport]:
        """One report per model this monitor watched, in the order it first saw them.

        The model watched last is ``report``. A re-compiled model is the same model.

        Returns:
            A list of ``XlaReport``, one per model.

        Example:
            `monitor`: the monitor of XlaMonitor's example, which watched one model.

            ```pycon
            >>> [report.steps["train"] for report in monitor.reports]
            [2]

            ```
        """
        return self._state.reports()
