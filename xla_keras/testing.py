"""Compile counts as tests: ``expect_compiles``.

Inside it, every ``fit`` / ``evaluate`` / ``predict`` of a Keras model is watched by a monitor (its
own, ``jit="on"``: it counts XLA programs; or one you pass), added to the call's callbacks for as long
as the block runs. On leaving, each phase's compiles are held to the count expected: the count the
report's ledger keeps (a partial last batch is a compile of its own). A phase given as None is not
checked.

The failure is an ``AssertionError`` that lists each extra compile: its phase, step, signature and
what changed since the phase's previous distinct signature (``batch 32 -> 8 (last batch)``).

Example:
    What a block expects, per phase (None: not checked); a bound that is no count is refused.

    ```pycon
    >>> from xla_keras.testing import expect_compiles
    >>> expect_compiles(train=1, test=0).expected
    {'train': 1, 'test': 0, 'predict': None}
    >>> expect_compiles(train=-1)
    Traceback (most recent call last):
    ...
    ValueError: expect_compiles: train must be a count >= 0 or None (not checked); got -1

    ```
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, List, Optional

from xla_keras.core.types import PHASES

__all__ = ["expect_compiles"]

_CALLS = ("fit", "evaluate", "predict")


def _bound(name: str, value: Optional[int]) -> Optional[int]:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"expect_compiles: {name} must be a count >= 0 or None (not checked); got {value!r}")
    return value


class expect_compiles:  # noqa: N801 - used like a function: `with expect_compiles(train=1):`
    """Fail unless the Keras calls inside compile exactly as many XLA programs per phase as expected.

    A context manager, and a decorator (``@expect_compiles(train=1)``); as a pytest fixture,
    ``xla_compiles`` is this class (the plugin loads with pytest and imports no framework).

    Args:
        train: compiles of the train step expected in the fits inside (None: not checked).
        test: compiles of the test step (validation and ``evaluate``); None: not checked.
        predict: compiles of the predict step; None: not checked.
        max_compile_seconds: the compiles' total time at most, or None.
        after_warmup: compiles of the step in the loop, every phase together (None: not checked; 0: nothing
            compiled once warm, vLLM's ``VLLM_XLA_CHECK_RECOMPILATION`` as a test). Warm-up is a phase's
            precompile (``XlaMonitor(precompile=...)``: then every compile of its step counts) or, without one,
            the phase's first step in the block.
        monitor: an ``XlaMonitor`` to count with; by default one of its own, ``jit="on"``, no files,
            silent.

    Raises:
        AssertionError: on leaving the block, when a count or the time is off, listing each extra
            compile with what changed.
        ValueError: for a bound that is not a count >= 0 (or seconds > 0), naming it.

    Example:
        `model`, `x`, `y`: any compiled Keras model and its data (64 rows: 2 full batches of 32).

        ```pycon
        >>> from xla_keras.testing import expect_compiles
        >>> with expect_compiles(train=1):
        ...     history = model.fit(x, y, batch_size=32, epochs=1, verbose=0)

        Nothing compiled in the loop once warm: a last batch of 16 rows compiles at step 2.

        ```pycon
        >>> with expect_compiles(train=None, after_warmup=0):  # doctest: +ELLIPSIS
        ...     history = model.fit(x[:48], y[:48], batch_size=32, epochs=1, verbose=0)
        Traceback (most recent call last):
          ...
        AssertionError: expected 0 compile(s) after warm-up, saw 1:
          train step 2: x:float32[16,4] y:float32[16,1] ...

        ```
    """

    def __init__(
        self,
        train: Optional[int] = 1,
        test: Optional[int] = None,
        predict: Optional[int] = None,
        max_compile_seconds: Optional[float] = None,
        monitor: Any = None,
        after_warmup: Optional[int] = None,
    ):
        self.expected: Dict[str, Optional[int]] = {
            "train": _bound("train", train),
            "test": _bound("test", test),
            "predict": _bound("predict", predict),
        }
        if max_compile_seconds is not None and (
            isinstance(max_compile_seconds, bool)
            or not isinstance(max_compile_seconds, (int, float))
            or not max_compile_seconds > 0
        ):
            raise ValueError(f"expect_compiles: max_compile_seconds must be > 0 or None; got {max_compile_seconds!r}")
        self.max_compile_seconds = max_compile_seconds
        self.after_warmup = _bound("after_warmup", after_warmup)
        self._monitor = monitor
        self._saved: Dict[str, Callable] = {}
        self._before: Dict[int, Any] = {}  # id(report) -> (records, counts) at entry (a monitor you passed)
        self.compilations: List[Any] = []  # the compiles of the block, once it ends
        self.counts: Dict[str, int] = dict.fromkeys(PHASES, 0)  # per phase, exact
        self.in_loop: List[Any] = []  # the compiles of the step after each phase's warm-up, once it ends

    @property
    def monitor(self) -> Any:
        if self._monitor is None:
            import xla_keras

            self._monitor = xla_keras.XlaMonitor(log_dir=None, jit="on", verbose=0)
        return self._monitor

    def __enter__(self) -> "expect_compiles":
        import keras

        monitor = self.monitor
        self._before = {id(r): (len(r.compilations), dict(r.compilation_count), dict(r.steps)) for r in monitor.reports}
        for name in _CALLS:
            original = getattr(keras.Model, name)
            self._saved[name] = original

            @functools.wraps(original)
            def watched(model, *args, _original=original, **kwargs):
                callbacks = kwargs.pop("callbacks", None)
                if not isinstance(callbacks, keras.callbacks.CallbackList):  # fit's validation passes its own
                    callbacks = list(callbacks or [])
                    if not any(cb is monitor for cb in callbacks):
                        callbacks.append(monitor)
                return _original(model, *args, callbacks=callbacks, **kwargs)

            setattr(keras.Model, name, watched)
        return self

    def __exit__(self, kind, error, traceback) -> None:
        import keras

        for name, original in self._saved.items():
            setattr(keras.Model, name, original)
        self._saved.clear()
        if kind is not None:
            return  # the block's own error is the one to see
        reports = self.monitor.reports
        before = {id(r): self._before.get(id(r), (0, {}, {})) for r in reports}
        self.compilations = [c for r in reports for c in r.compilations[before[id(r)][0] :]]
        self.in_loop = []  # the compiles of the step after each phase's warm-up
        for r in reports:
            block = r.compilations[before[id(r)][0] :]
            precompiled = {c.phase for c in block if c.precompiled}
            first = {p: before[id(r)][2].get(p, 0) + 1 for p in PHASES}  # each phase's first step in the block
            self.in_loop += [
                c
                for c in block
                if not c.precompiled and c.outside_step is None and (c.phase in precompiled or c.step > first[c.phase])
            ]
        self.counts = {  # the ledger's exact counts (the records above may be capped: max_records)
            p: sum(r.compilation_count.get(p, 0) - before[id(r)][1].get(p, 0) for r in reports) for p in PHASES
        }
        problems = self.problems()
        if problems:
            raise AssertionError("\n".join(problems))

    def __call__(self, function: Callable) -> Callable:
        expected = {
            **self.expected,
            "max_compile_seconds": self.max_compile_seconds,
            "monitor": self._monitor,
            "after_warmup": self.after_warmup,
        }

        @functools.wraps(function)
        def checked(*args, **kwargs):
            with expect_compiles(**expected):
                return function(*args, **kwargs)

        return checked

    def problems(self) -> List[str]:
        """What is off, one line per count or extra compile ([] when all is as expected)."""
        from xla_keras.core.signatures import describe, to_jsonable
        from xla_keras.core.timing import ms_text
        from xla_keras.tensorboard.views import change_text

        lines: List[str] = []
        for phase in PHASES:
            expected = self.expected[phase]
            seen, count = [c for c in self.compilations if c.phase == phase], self.counts[phase]
            if expected is None or count == expected:
                continue
            lines.append(f"expected {expected} {phase} compile(s), saw {count}" + (":" if seen[expected:] else ""))
            for index in range(expected, len(seen)):  # each extra one, against the phase's previous signature
                c, previous = seen[index], to_jsonable(seen[index - 1].signature) if index else None
                change = change_text(previous, to_jsonable(c.signature), c.last_batch)
                lines.append(f"  {phase} step {c.step}: {describe(c.signature)} ({change})")
        if self.after_warmup is not None and len(self.in_loop) != self.after_warmup:
            lines.append(f"expected {self.after_warmup} compile(s) after warm-up, saw {len(self.in_loop)}:")
            for c in self.in_loop[:20]:
                lines.append(f"  {c.phase} step {c.step}: {describe(c.signature)} (cause: {c.cause or 'unknown'})")
        total = sum(c.seconds for c in self.compilations)
        if self.max_compile_seconds is not None and total > self.max_compile_seconds:
            lines.append(f"compiles took {ms_text(total)}, more than max_compile_seconds={self.max_compile_seconds}")
        return lines
