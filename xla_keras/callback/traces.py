"""Profiler trace windows for TensorBoard's Profile tab: when to open one, and closing only ours.

``profile="auto"`` opens one window of 5 steady train steps after warm-up (at
least 10 steps into the fit and 5 since the last new input signature; on JAX none in a
fit planned shorter than 100 steps, where the trace's ~0.1 s would be a share of it), and,
on TensorFlow, after a storm opens, one on the next recompiling train step
(``Backend.storm_trace_window``): once each per report (per model), however
many fits it spans;
``profile=(start, stop)`` traces those train steps; None traces nothing. A
window yields to ``keras.callbacks.TensorBoard(profile_batch=...)`` and to any
other profiler (skipped with one note: only what we started is ever stopped),
ends where validation begins (validation steps are probed, not traced; a
user's range resumes after it), and is not opened under multi-worker training
unless the user asked for a range. The backend starts and stops the profiler.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, List, Optional, Tuple

from xla_keras.core.types import Notes

STEADY_WINDOW_STEPS = 5
WARM_UP_STEPS = 10
# Where the backend says so (``Backend.steady_window_in_short_fits``: JAX), a fit planned shorter than this
# (Keras's steps per epoch times its epochs) gets no automatic steady window: starting, stopping and saving
# a trace took ~0.1 s, a tenth of a 20-step fit, for 5 steps few would open.
MIN_FIT_STEPS_FOR_WINDOW = 100
QUIET_FOR_GOOD = 1 << 30


class TraceWindows:
    def __init__(
        self,
        profile: Any,
        backend_traces: Any,
        notes: Notes,
        missing_viewer: Callable[[], Optional[str]] = lambda: None,
        own_work: Callable[[str, float], None] = lambda kind, seconds: None,
    ):
        self.profile = profile
        self._backend = backend_traces  # start_trace(dir), stop_trace() -> a save that can wait, or None
        self.notes = notes
        self._own_work = own_work  # the time of the monitor's own work: starting, stopping, saving windows
        # Windows stopped whose save waits for the fit's end (JAX: saving takes seconds after a storm),
        # with their save: (window, last step, save).
        self._unsaved: List[Tuple[dict, Optional[int], Callable[[], None]]] = []
        self._missing_viewer = missing_viewer  # how to get the Profile tab, when it is not installed
        self.open: Optional[dict] = None  # the window we opened: kind, stop_step, dir, started
        self.saved: List[str] = []  # "kind: session dir" of every window saved
        # The steady window's session dir and the train steps it holds (the coverage reads it).
        self.steady_session: Optional[Tuple[str, int]] = None
        self._plan: dict = {}
        self._fit_first_step = 1

    def begin_fit(self, first_step: int, keras_profiles: bool, planned_steps: Optional[int] = None) -> None:
        """A fit starts at train step ``first_step``; ``keras_profiles``: keras's TensorBoard profiles it;
        ``planned_steps``: its train steps as Keras plans them (None: unknown, e.g. a generator)."""
        self._fit_first_step = first_step
        # The automatic windows (steady, storm) are once per report, not once per fit: a script that
        # calls fit(epochs=1) in a loop would otherwise pay a trace (~0.2 s) and a directory per call.
        self._plan = {
            "steady": self._plan.get("steady", False),
            "storm": self._plan.get("storm", False),
            "range": False,
            "storm_pending": False,
            "keras_profiles": keras_profiles and self.profile == "auto",
            "short": self.profile == "auto"
            and not getattr(self._backend, "steady_window_in_short_fits", True)
            and planned_steps is not None
            and planned_steps < MIN_FIT_STEPS_FOR_WINDOW,
        }
        if self._plan["short"] and not self._plan["steady"]:
            self.notes.add_once(
                "trace-short-fit",
                f"no automatic trace window: the fit has {planned_steps} train steps ({MIN_FIT_STEPS_FOR_WINDOW} "
                "needed, a trace costs ~0.1 s); profile=(start, stop) traces a range of them",
            )
        if self._plan["keras_profiles"]:
            self.notes.add_once(
                "keras-profiles",
                "keras.callbacks.TensorBoard(profile_batch=...) profiles this fit: "
                "the monitor's automatic traces stay out of its way",
            )
        if isinstance(self.profile, tuple) and self.profile[1] < first_step:
            self.notes.add_once(
                "range-behind",
                f"profile={self.profile} names train steps before this fit's first "
                f"step ({first_step}; steps count from optimizer.iterations, across fits): "
                "nothing is traced",
                warn=True,
            )

    def storm_opened(self) -> None:
        wanted = getattr(self._backend, "storm_trace_window", True)  # Backend.storm_trace_window
        if self.profile == "auto" and not self._plan.get("storm") and wanted:
            self._plan["storm_pending"] = True  # trace the next recompiling train step

    def maybe_start(
        self,
        phase: str,
        last_step: int,
        batches: int,
        has_new: bool,
        last_new_step: int,
        log_dir: Optional[str],
        multi_worker: bool,
    ) -> bool:
        """Open a window if this train call should be in one. True if the call runs inside a window."""
        if self.open is not None:
            return True
        if phase != "train" or self.profile is None or log_dir is None:
            return False
        kind, stop = self._decide(last_step, batches, has_new, last_new_step, multi_worker)
        if kind is None:
            return False
        plan = self._plan
        plan[kind] = True
        if kind == "storm":
            plan["storm_pending"] = False
        run_dir = os.path.join(log_dir, "train")
        began = time.perf_counter()
        try:
            self._backend.start_trace(run_dir)
        except Exception as error:  # noqa: BLE001 - another profiler: skip, never crash
            self.notes.add_once(
                "trace-busy",
                f"skipped a profiler trace: another profiler is running ({error!r}); stop only what we started",
            )
            return False
        finally:
            self._own_work("traces", time.perf_counter() - began)
        self.open = {"kind": kind, "stop_step": stop, "dir": run_dir, "started": time.time(), "first": last_step + 1}
        return True

    def quiet_steps(
        self, phase: str, last_step: int, last_new_step: int, log_dir: Optional[str], multi_worker: bool
    ) -> int:
        """How many coming one-batch calls with no new signature, from ``last_step + 1`` on, open no
        window (0: the next one may; ``QUIET_FOR_GOOD``: none will). The step path's fast paths skip
        ``maybe_start`` for those calls; the steady lane asks once for all of them."""
        if self.open is not None:
            return 0
        if phase != "train" or self.profile is None or log_dir is None:
            return QUIET_FOR_GOOD
        plan, first = self._plan, last_step + 1
        if isinstance(self.profile, tuple):  # _decide's "range"
            start, end = self.profile
            return QUIET_FOR_GOOD if plan.get("range") or first > end else max(0, start - first)
        if plan.get("keras_profiles") or multi_worker or plan.get("steady") or plan.get("short"):
            return QUIET_FOR_GOOD  # a storm window needs a new signature: never in these calls
        opens = max(self._fit_first_step + WARM_UP_STEPS, last_new_step + STEADY_WINDOW_STEPS + 1)
        return max(0, opens - first)

    def _decide(self, last_step: int, batches: int, has_new: bool, last_new_step: int, multi_worker: bool):
        """(kind, stop step) of the window this train call should open, or (None, None)."""
        plan, first = self._plan, last_step + 1
        kind = stop = None
        if isinstance(self.profile, tuple):
            start, end = self.profile
            if not plan.get("range") and first <= end and first + batches - 1 >= start:  # the call overlaps
                kind, stop = "range", end
        elif plan.get("keras_profiles") or multi_worker:
            return None, None  # keras's TensorBoard profiles this fit / multi-worker: only ranges the user asked
        elif plan.get("storm_pending") and has_new:
            kind, stop = "storm", last_step + batches  # one recompiling step
        elif (
            not plan.get("steady")
            and not plan.get("short")
            and not has_new
            and first >= self._fit_first_step + WARM_UP_STEPS
            and first - last_new_step > STEADY_WINDOW_STEPS
        ):
            kind, stop = "steady", last_step + STEADY_WINDOW_STEPS
        return kind, stop

    def after_step(self, phase: str, step: int) -> None:
        if self.open is not None and phase == "train" and step >= self.open["stop_step"]:
            self.stop(step)

    def validation_begins(self, train_step: int) -> None:
        """A train window ends where validation begins; the user's own range resumes after it."""
        if self.open is None:
            return
        kind, stop = self.open["kind"], self.open["stop_step"]
        self.stop(train_step)
        if kind == "range" and train_step < stop:
            self._plan["range"] = False
            self.notes.add_once(
                "range-split",
                f"profile={self.profile}: validation ran inside the range, so its "
                "trace is split in two sessions (validation steps are not traced)",
            )

    def stop(self, last_step: Optional[int] = None) -> Optional[str]:
        """Stop the window we opened (and only that one) after train step ``last_step`` (None: its planned
        end); returns the saved session dir."""
        window, self.open = self.open, None
        if window is None:
            return None
        began = time.perf_counter()
        try:
            save = self._backend.stop_trace()
        except Exception as error:  # noqa: BLE001 - the window is lost, training goes on
            self.notes.add_once("trace-stop", f"a profiler trace could not be saved: {error!r}", warn=True)
            return None
        finally:
            self._own_work("traces", time.perf_counter() - began)
        if save is not None:  # saved at the fit's end (save_pending), off the step path
            self._unsaved.append((window, last_step, save))
            return None
        return self._saved(window, last_step)

    def save_pending(self) -> None:
        """Save the windows whose save waited (at the fit's end, and at exit): off every step."""
        unsaved, self._unsaved = self._unsaved, []
        for window, last_step, save in unsaved:
            began = time.perf_counter()
            try:
                save()
            except Exception as error:  # noqa: BLE001 - the window is lost, the rest goes on
                self.notes.add_once("trace-stop", f"a profiler trace could not be saved: {error!r}", warn=True)
                continue
            finally:
                self._own_work("traces", time.perf_counter() - began)
            self._saved(window, last_step)

    def _saved(self, window: dict, last_step: Optional[int]) -> Optional[str]:
        """The bookkeeping of a saved window: its session dir, and the steady window's steps."""
        profile_dir = os.path.join(window["dir"], "plugins", "profile")
        sessions = (
            sorted((os.path.join(profile_dir, d) for d in os.listdir(profile_dir)), key=os.path.getmtime)
            if os.path.isdir(profile_dir)
            else []
        )
        if not sessions:
            return None
        self.saved.append(f"{window['kind']}: {sessions[-1]}")
        if window["kind"] == "steady":
            last = window["stop_step"] if last_step is None else min(last_step, window["stop_step"])
            self.steady_session = (sessions[-1], max(1, last - window["first"] + 1))
        fix = self._missing_viewer()
        if fix:
            self.notes.add_once(
                "profile-tab",
                "profiler traces were written, but the Profile tab's plugin is not "
                f"installed, so TensorBoard will not show them. Fix: {fix}",
            )
        return sessions[-1]

    def stop_quietly(self) -> None:
        """On an error path: never raise."""
        try:
            self.stop()
            self.save_pending()
        except Exception:  # noqa: BLE001 - already failing
            pass
