"""xla_keras.compare: the XLA configurations side by side on the same model and batches.

Each mode trains a fresh copy of the model (same initial weights, same
optimizer config) on the same batches, observed by an XlaMonitor, and the
table says per mode: first-step time, compile time, steady step time and its
spread, speedup against "off", break-even step, whether XLA really ran, and
compiles. On small CPUs XLA is often slower: the table shows it.
"""

from __future__ import annotations

import functools
import os
import statistics
from dataclasses import asdict, dataclass
from typing import Any, Callable, List, Optional, Sequence, Union

from xla_keras.core.plain_data import integer
from xla_keras.core.timing import MIN_COMPARE_STEPS, break_even_steps, comparable
from xla_keras.report.model import XlaReport


@dataclass
class ModeResult:
    mode: str
    xla_ran: Optional[bool]
    reason: str
    compiles: int
    first_step_seconds: float
    compile_seconds: float
    steady_step_ms: Optional[float]
    steady_spread_ms: Optional[float]  # interquartile range of the steady steps
    steady_samples: int = 0
    speedup_vs_off: Optional[float] = None  # None when either side has fewer than MIN_COMPARE_STEPS steady steps
    break_even_step: Optional[float] = None  # None: unknown or never; 0: ahead from the first step
    # JAX: executables compiled inside the steps that are not a whole-step program (op by op under
    # "off"): real compile cost of that mode, included in compile_seconds.
    op_level_compiles: int = 0


@dataclass
class CompareTable:
    """What ``compare()`` measured, one row per mode; ``print(table)`` shows the table.

    Per mode: whether XLA really ran, compiles, first-step time, compile time, the steady step
    time (median of the steps that compiled nothing) and its spread, the speedup against "off"
    and the break-even step. On small CPUs XLA is often slower: the table says so.

    Args:
        steps: batches each mode trained on.
        results: one row per mode, "off" first: each has ``mode``, ``xla_ran`` (True, False, or
            None: unknown), ``reason``, ``compiles``, ``first_step_seconds``, ``compile_seconds``,
            ``steady_step_ms``, ``steady_spread_ms`` (interquartile range), ``steady_samples``,
            ``speedup_vs_off`` (None with fewer than 20 steady steps, ``MIN_COMPARE_STEPS``, on
            either side: withheld, and the table says so),
            ``break_even_step`` (None: unknown or never; 0: ahead from the first step) and
            ``op_level_compiles`` (JAX: executables compiled op by op inside the steps).

    Example:
        `table`: what ``xla_keras.compare`` returned in its example (4 steps per mode).

        ```pycon
        >>> table.steps, [row.mode for row in table.results]
        (4, ['off', 'on'])
        >>> print(table)  # doctest: +ELLIPSIS
        xla_keras.compare: 4 steps per mode, same initial weights and batches
        mode             XLA ran compiles  first step   compile   steady step (n)   spread  vs off  break-even
        off                   NO        0 ...
        on                   yes        1 ...

        ```
    """

    steps: int
    results: List[ModeResult]

    def to_dict(self) -> dict:
        """The table as plain data (JSON-able).

        Returns:
            ``{"steps": int, "results": [dict per mode]}``, each result with the fields above.

        Example:
            `table`: what ``xla_keras.compare`` returned in its example.

            ```pycon
            >>> [(row["mode"], row["compiles"]) for row in table.to_dict()["results"]]
            [('off', 0), ('on', 1)]

            ```
        """
        return {"steps": self.steps, "results": [asdict(r) for r in self.results]}

    def __str__(self) -> str:
        head = (
            f"{'mode':15s} {'XLA ran':>8s} {'compiles':>8s} {'first step':>11s} {'compile':>9s} "
            f"{'steady step (n)':>17s} {'spread':>8s} {'vs off':>7s} {'break-even':>11s}"
        )
        lines = [f"xla_keras.compare: {self.steps} steps per mode, same initial weights and batches", head]
        for r in self.results:
            ran = {True: "yes", False: "NO", None: "?"}[r.xla_ran]
            steady = f"{r.steady_step_ms:.3f} ms ({r.steady_samples})" if r.steady_step_ms is not None else "n/a"
            spread = f"{r.steady_spread_ms:.3f}" if r.steady_spread_ms is not None else "n/a"
            speed = f"{r.speedup_vs_off:.2f}x" if r.speedup_vs_off is not None else "n/a"
            if r.mode == "off" or not r.xla_ran:
                even = "-"
            elif r.break_even_step is not None:
                even = f"{r.break_even_step:.0f}"
            else:
                even = "never" if r.speedup_vs_off is not None and r.speedup_vs_off <= 1 else "n/a"
            lines.append(
                f"{r.mode:15s} {ran:>8s} {r.compiles:8d} {r.first_step_seconds * 1e3:9.0f} ms "
                f"{r.compile_seconds * 1e3:6.0f} ms {steady:>17s} {spread:>8s} {speed:>7s} {even:>11s}"
            )
        if any(not comparable(r.steady_samples, self.results[0].steady_samples) for r in self.results):
            lines.append(
                f"vs off, break-even: withheld where a side has fewer than {MIN_COMPARE_STEPS} steady steps (n); "
                "measure more steps"
            )
        slower = [
            r.mode for r in self.results if r.speedup_vs_off is not None and r.speedup_vs_off < 1 and r.mode != "off"
        ]
        if slower:
            lines.append(f"XLA is slower than 'off' here for: {', '.join(slower)} (common on small CPUs).")
        for r in self.results:
            if r.xla_ran is False and r.mode != "off":
                lines.append(f"{r.mode}: XLA did not run: {r.reason}")
            if r.op_level_compiles:
                lines.append(
                    f"{r.mode}: JAX also compiled {r.op_level_compiles} op-level executable(s) inside the "
                    "steps (one per primitive and shape when a step runs op by op): in its compile time"
                )
        if any(r.break_even_step == 0 for r in self.results):
            lines.append("break-even 0: that mode compiled less than 'off' did, so it is ahead from the first step.")
        return "\n".join(lines)


def _is_tf_dataset(data: Any) -> bool:
    return type(data).__module__.startswith("tensorflow") and hasattr(data, "take")


def _batches(data: Any, steps: int, batch_size: int, backend: str = "tensorflow") -> list:
    """``steps`` batches, the same for every mode; data with fewer batches is
    cycled (every step a mode times is a real step). Tensors on TensorFlow,
    numpy arrays on JAX (no TensorFlow needed unless the data is tf.data)."""
    import itertools

    if _is_tf_dataset(data):
        batches = list(data.take(steps).as_numpy_iterator() if backend == "jax" else data.take(steps))
    elif isinstance(data, (tuple, list)) and 1 <= len(data) <= 3:
        if backend == "jax":
            import numpy as np

            tensor = np.asarray
        else:
            import tensorflow as tf

            tensor = tf.constant
        n = len(data[0])
        batches = [tuple(tensor(part[i : i + batch_size]) for part in data) for i in range(0, n, batch_size)][:steps]
    else:
        raise TypeError(
            "data must be a tf.data.Dataset of batches or a tuple (x, y[, sample_weight]) of arrays; "
            f"got {type(data).__name__}"
        )
    if not batches:
        raise ValueError("data yielded no batch")
    return list(itertools.islice(itertools.cycle(batches), steps))


def _dataset(batches: list, backend: str = "tensorflow") -> Any:
    """The batches as a dataset whose spec keeps every dimension the batches
    agree on (an unbuilt model needs its feature sizes), None elsewhere. On
    JAX: a keras.utils.PyDataset over the same batches."""
    if backend == "jax":
        return _batch_list(batches)
    import tensorflow as tf

    def spec(*leaves):
        dims = [
            d if all(len(t.shape) == len(leaves[0].shape) and t.shape[i] == d for t in leaves) else None
            for i, d in enumerate(leaves[0].shape)
        ]
        return tf.TensorSpec([None] + dims[1:], leaves[0].dtype)

    signature = tf.nest.map_structure(spec, *batches)
    return tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=signature)


def _batch_list(batches: list) -> Any:
    import keras

    class Batches(keras.utils.PyDataset):
        def __len__(self):
            return len(batches)

        def __getitem__(self, index):
            return batches[index]

    return Batches()


def _built(model: Any, batch: Any) -> Any:
    """Build a model that has no weights yet on one batch, so its weights exist to copy."""
    if not model.weights:
        x = batch[0] if isinstance(batch, tuple) else batch
        model(x)
    return model


def _copier(model_or_builder: Union[Any, Callable[[], Any]], batch: Any) -> Callable[[], Any]:
    """Fresh compiled copies with the same initial weights and optimizer config."""
    import keras

    if isinstance(model_or_builder, keras.Model):
        source = model_or_builder
        if not source.compiled:
            raise ValueError("compare() needs a compiled model (or a builder that returns one)")
        weights = _built(source, batch).get_weights()
        config = source.get_compile_config()

        def copy():
            try:
                clone = keras.models.clone_model(source)
            except Exception as error:  # noqa: BLE001 - say what to do instead
                raise TypeError(
                    f"compare() could not clone this model ({error}); pass a function that builds "
                    "and compiles a new one instead"
                ) from error
            _built(clone, batch).set_weights(weights)
            clone.compile_from_config(config)
            return clone

        return copy
    if callable(model_or_builder):
        weights = _built(model_or_builder(), batch).get_weights()

        def build():
            model = _built(model_or_builder(), batch)
            model.set_weights(weights)
            return model

        return build
    raise TypeError(
        f"model_or_builder must be a compiled keras.Model or a function returning one; "
        f"got {type(model_or_builder).__name__}"
    )


def compare(
    model_or_builder: Union[Any, Callable[[], Any]],
    data: Any,
    steps: int = 50,
    modes: Optional[Sequence[str]] = None,
    log_dir: Optional[str] = None,
    batch_size: int = 32,
) -> CompareTable:
    """Run the configurations side by side and return the table.

    Args:
        model_or_builder: a compiled keras.Model (copied with its weights and
            compile config) or a function returning a new compiled model.
        data: a tf.data.Dataset of batches, or (x, y[, sample_weight]) arrays.
        steps: batches per mode (the same batches for every mode; data with
            fewer batches is cycled).
        modes: any of "off", "autoclustering", "on" ("off" is added as the
            baseline if missing). Default: all three on TensorFlow; "off" and
            "on" under Keras's JAX backend (auto-clustering is TensorFlow's).
        log_dir: if given, each mode is written as its own TensorBoard run
            (``log_dir/<mode>/train``).
        batch_size: for array data.

    Returns:
        A ``CompareTable``: one row per mode, "off" first; ``print(table)`` shows it.

    Raises:
        ValueError: ``modes`` not drawn from the backend's modes, ``steps`` below 3, a model
            that is not compiled, or data that yields no batch.
        TypeError: a ``model_or_builder`` that is neither a Keras model nor a function (or a
            model that cannot be cloned: pass a function), or data that is neither a
            ``tf.data.Dataset`` nor ``(x, y[, sample_weight])`` arrays.
        RuntimeError: a Keras backend or version the monitor cannot observe.

    Example:
        `model`, `x`, `y`: any compiled Keras model and its data. Each mode trains a fresh copy of
        the model on the same batches (here 4 steps; measure 50 or more for real figures):

        ```pycon
        >>> table = xla_keras.compare(model, (x, y), steps=4, modes=["on"])
        >>> [(row.mode, row.xla_ran, row.compiles) for row in table.results]
        [('off', False, 0), ('on', True, 1)]

        ```
    """
    import keras

    from xla_keras.backends import backend_for
    from xla_keras.monitor import XlaMonitor

    backend_name = keras.backend.backend()
    backend = backend_for(backend_name)
    unsupported = backend().unsupported()
    if unsupported:  # every mode's monitor would step aside: a table would compare nothing
        reason = unsupported.replace(" The fit goes on unmonitored.", "")
        raise RuntimeError(f"xla_keras.compare cannot run here: {reason}")
    modes = _checked_modes(modes, backend.jit_modes, backend_name)
    count = integer(steps)
    if count is None or count < 3:
        raise ValueError(f"steps must be an int >= 3; got {steps!r}")
    steps = count
    order = ["off"] + [m for m in modes if m != "off"]
    batches = _batches(data, steps, batch_size, backend_name)
    new_model = _copier(model_or_builder, batches[0])

    class StepTimes(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.times: List[float] = []

        def on_train_batch_begin(self, batch, logs=None):
            self.start = _now()

        def on_train_batch_end(self, batch, logs=None):
            self.times.append(_now() - self.start)

    # Warm TensorFlow's runtime (threads, tf.data, kernels) on a throwaway copy,
    # so the first mode measured is not also paying for the process's first steps.
    new_model().fit(_dataset(batches[:3], backend_name), epochs=1, verbose=0)

    results, monitors = [], {}
    for mode in order:
        model = new_model()
        monitor = XlaMonitor(
            log_dir=os.path.join(log_dir, mode) if log_dir else None, jit=mode, verbose=0, profile=None
        )
        timer = StepTimes()
        monitors[mode] = monitor
        model.fit(_dataset(batches, backend_name), epochs=1, callbacks=[timer, monitor], verbose=0)
        results.append(_mode_result(mode, monitor.report, timer.times))
    _against_off(results)
    if log_dir:
        _write_break_even(log_dir, results, monitors)
    return CompareTable(steps=len(batches), results=[r for r in results if r.mode in modes or r.mode == "off"])


def _checked_modes(modes: Optional[Sequence[str]], jit_modes: Sequence[str], backend_name: str) -> Sequence[str]:
    """The modes to measure (the backend's default set for ``None``), or a ValueError naming the choices."""
    measurable = tuple(m for m in jit_modes if m not in ("keep", "fastest"))  # fastest picks among them
    choices = ", ".join(map(repr, measurable))
    if modes is None:
        return ("off", "autoclustering", "on") if backend_name == "tensorflow" else ("off", "on")
    if isinstance(modes, str):
        raise ValueError(
            f"modes must be a sequence of modes drawn from {choices}, e.g. ({modes!r},); got the string {modes!r}"
        )
    bad = [m for m in modes if m not in measurable]
    if bad or not modes:
        extra = (
            " (auto-clustering is a TensorFlow feature; Keras runs the JAX backend here)"
            if "autoclustering" in bad and backend_name == "jax"
            else ""
        )
        raise ValueError(f"modes must be drawn from {choices}; got {list(modes)!r}{extra}")
    return modes


def _mode_result(mode: str, report: XlaReport, times: List[float]) -> ModeResult:
    """One mode's row: its compiles (the report's) and its steady steps (the callback's times, the steps
    that compiled left out)."""
    compile_steps = {c.step - 1 for c in report.compilations if c.phase == "train"}
    steady = [t for i, t in enumerate(times) if i and i not in compile_steps]
    spread = None
    if len(steady) >= 4:
        q = statistics.quantiles(steady, n=4)
        spread = (q[2] - q[0]) * 1e3
    in_steps = report.other_compilations.get("in_steps") or {}
    return ModeResult(
        mode=mode,
        xla_ran=report.jit_active,
        reason=report.jit_reason,
        compiles=report.total_compilations,
        first_step_seconds=times[0] if times else 0.0,
        compile_seconds=report.compile_seconds + float(in_steps.get("seconds", 0.0)),
        steady_step_ms=statistics.median(steady) * 1e3 if steady else None,
        steady_spread_ms=spread,
        steady_samples=len(steady),
        op_level_compiles=int(in_steps.get("count", 0)),
    )


def _against_off(results: List[ModeResult]) -> None:
    """Each mode's speed-up over "off" (``results[0]``) and its break-even step, where comparable."""
    baseline = results[0].steady_step_ms
    for r in results:
        if baseline and r.steady_step_ms and comparable(r.steady_samples, results[0].steady_samples):
            r.speedup_vs_off = baseline / r.steady_step_ms
            # What XLA's compiles cost beyond what "off" compiled (JAX compiles op by op there too).
            extra_seconds = r.compile_seconds - results[0].compile_seconds
            if r.mode != "off" and r.xla_ran and r.compile_seconds > 0:
                even = (
                    0.0
                    if extra_seconds <= 0
                    else break_even_steps(extra_seconds, r.steady_step_ms / 1e3, baseline / 1e3)
                )
                r.break_even_step = None if even is None or even == float("inf") else even


def _same(value: Any) -> Any:
    return value


def _write_break_even(log_dir: str, results: List["ModeResult"], monitors: dict) -> None:
    """Each XLA mode's report learns its break-even against the "off" mode measured beside it (the
    monitor alone has no non-XLA baseline), so the report file and the XLA tab show it too."""
    from xla_keras.tensorboard.sink import OutputSink

    for r in results:
        if r.break_even_step is None:
            continue
        report = monitors[r.mode].report
        report.break_even_steps = r.break_even_step
        report.notes.append(
            f"break-even measured by compare() against its 'off' mode ({results[0].steady_step_ms:.3f} "
            f"ms per steady step over {results[0].steady_samples} steps, vs {r.steady_step_ms:.3f} ms over "
            f"{r.steady_samples} here)"
        )
        sink = OutputSink(os.path.join(log_dir, r.mode))
        sink.flush(report=functools.partial(_same, report), text=True, step=report.steps["train"])
        sink.close()


def _now() -> float:
    import time

    return time.perf_counter()
