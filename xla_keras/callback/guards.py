"""The monitor never kills training by accident, and never leaves a mess behind.

Three guards:

* ``guarded``: around every hook and step-path method of the monitor. An error
  of its own is logged once, the monitor disables itself (giving back the
  profiler, the flags and the wrappers) and training goes on. Only a storm
  with ``on_storm="raise"`` and an unwritable log_dir stop a fit, by design.
* ``guard_callback_list``: wraps the hooks of the running call's Keras
  CallbackList, once per list, so that an exception escaping *any* callback
  reaches every monitor of the call before it reaches the user (Keras then
  skips the end hooks, and the step wrapper never sees an error raised between
  steps). As a backstop for what no hook sees (a Ctrl-C in Keras's own loop
  code), a monitor also cleans up when the list is freed, i.e. when the call's
  frames are gone, if its end hook never ran.
* ``flush_at_exit``: at interpreter exit, a run interrupted outside the
  monitor's reach still gets its profiler freed, its flags restored and its
  files flushed.

What they call on an internal error is ``Containment`` (callback/containment.py): the monitor disables
itself once, logged, and training goes on.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any, Callable, Optional, Protocol, Tuple, Type

# Not the batch-begin hooks: a guard costs a frame at every step (without any batch-hook guard, one
# paired run of a 0.25 ms jitted step measured 9 us added instead of 19: near the machine's noise,
# benchmarks/overhead.py), and an error there is rare. The batch-end hooks stay guarded:
# user callbacks do their work there, and under JAX the errors of Keras's asynchronous batch-end
# callbacks surface there. What no guard sees is cleaned up when the list is freed (the backstop).
GUARDED_HOOKS = (
    "on_epoch_begin",
    "on_epoch_end",
    "on_train_batch_end",
    "on_train_end",
    "on_test_begin",
    "on_test_end",
    "on_test_batch_end",
    "on_predict_begin",
    "on_predict_end",
    "on_predict_batch_end",
)


# Guarded only in a list where some callback overrides one of them (``Backend.batch_begin_hooks_in_use``):
# then the callback's own work there costs more than the guard's frame, and an error it raises (a device
# error surfacing where a callback reads a weight, say) would otherwise reach the user with the monitor
# still believing the call runs. Keras's own batch-begin hooks of a list with no such callback do nothing.
BATCH_BEGIN_HOOKS = ("on_train_batch_begin", "on_test_batch_begin", "on_predict_batch_begin")

END_HOOKS = ("on_train_end", "on_test_end", "on_predict_end")  # after these, the monitor may speak


class Guarded(Protocol):
    """What the guards use of a monitor (its error-containment names)."""

    call_token: Optional[object]  # the fit / evaluate / predict being watched: its CallbackList's token

    def active(self) -> bool:
        """False once the monitor disabled itself: guarded methods do nothing."""

    def disable_after_error(self, error: BaseException) -> None:
        """An internal error: log it once, stop observing, give back everything changed."""

    def callback_failed(self) -> None:
        """A callback of the call raised, or the call is gone without its end hook: clean up."""

    def call_ended_everywhere(self) -> None:
        """Every callback's end hook of the call ran (Keras's progress bar is done): say what is due."""

    def release_at_exit(self) -> None:
        """At interpreter exit: free the profiler, restore the flags, flush."""


def guarded(*passthrough: Type[BaseException]) -> Callable:
    """Decorate a monitor method: skipped once the monitor is disabled; an
    exception other than ``passthrough`` ones disables the monitor instead of
    reaching Keras."""

    def decorate(method):
        @functools.wraps(method)
        def run(self, *args, **kwargs):
            if not self.active():
                return None
            try:
                return method(self, *args, **kwargs)
            except passthrough:
                raise
            except Exception as error:  # noqa: BLE001 - by design, see the module's docstring
                self.disable_after_error(error)
                return None

        return run

    return decorate


def guard_callback_list(
    monitor: Guarded,
    callback_list: Any,
    end_of_data: Tuple[Type[BaseException], ...],
    begin_hooks: Tuple[str, ...] = (),
) -> None:
    """See the module's docstring. ``end_of_data``: what Keras catches to end an epoch
    (it goes on after those: they are no error). ``begin_hooks``: the batch-begin hooks some callback
    of the list overrides (``BATCH_BEGIN_HOOKS``), guarded too."""
    if callback_list is None:
        return
    token = monitor.call_token = object()
    weakref.finalize(callback_list, _call_gone, weakref.ref(monitor), token)
    if getattr(callback_list, "_xla_keras_guarded", False):
        return

    list_ref = weakref.ref(callback_list)  # no cycle: the list must be freed with the call's frames

    def guard(hook):  # the class's function: a bound method would hold the list too
        ending = hook.__name__ in END_HOOKS  # decided once: the batch hooks run at every step

        @functools.wraps(hook)
        def run(*args, **kwargs):
            try:
                result = hook(list_ref(), *args, **kwargs)
                if ending:
                    for cb in getattr(list_ref(), "callbacks", []):
                        if getattr(cb, "_xla_keras_monitor", False):
                            cb.call_ended_everywhere()
                return result
            except end_of_data:
                raise  # Keras ends the epoch on these and goes on (catch_stop_iteration)
            except BaseException:
                for cb in getattr(list_ref(), "callbacks", []):
                    if getattr(cb, "_xla_keras_monitor", False):
                        cb.callback_failed()
                raise

        return run

    for name in GUARDED_HOOKS + tuple(h for h in begin_hooks if h in BATCH_BEGIN_HOOKS):
        hook = getattr(type(callback_list), name, None)
        if hook is not None:
            setattr(callback_list, name, guard(hook))  # instance attributes: gone with the list
    callback_list._xla_keras_guarded = True


def _call_gone(ref, token) -> None:
    """The CallbackList of a monitored call was freed: if that call never
    reached its end hook, clean up now."""
    monitor = ref()
    if monitor is not None and monitor.call_token is token:
        monitor.callback_failed()


def flush_at_exit(ref) -> None:
    """Backstop for runs interrupted outside the monitor's reach (registered with atexit)."""
    monitor = ref()
    if monitor is None:
        return
    try:
        monitor.release_at_exit()
    except Exception:  # noqa: BLE001 - interpreter shutdown: best effort
        pass
