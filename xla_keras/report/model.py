"""XlaReport and the records it lists (``Compilation``, ``SlowStep``): plain dataclasses and their JSON
round-trip. Pure: no TensorFlow.

``to_dict()`` keys are a contract: add keys, never rename or remove them, and bump ``SCHEMA_VERSION`` when
adding (readers go through ``schema.parse_report``). The words are ``render.py``'s.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

from xla_keras.core.plain_data import converters, plain, record_dict, record_from_dict
from xla_keras.core.program_cost import ProgramCost
from xla_keras.core.signatures import InputSignature, from_jsonable, to_jsonable
from xla_keras.core.timing import excess_over_steady
from xla_keras.core.types import PHASES
from xla_keras.report.render import (
    render,
    render_markdown,
    summary,
)
from xla_keras.storms.budget import PhaseAdvice
from xla_keras.storms.detection import Storm


def _each(read: Callable[[Any], Any]) -> Callable[[Any], List[Any]]:
    """A JSON list of records read back one by one."""
    return lambda items: [read(item) for item in items]


def _finite_or_none(x: Optional[float]) -> Optional[float]:
    return None if x is None or math.isinf(x) or math.isnan(x) else x


# The records an XlaReport lists: one XLA compile (``Compilation``) and one slow steady step


# Why a compile's seconds are estimated from step time (``Compilation.estimated_because``), in words.
ESTIMATED_BECAUSE = {
    "trace_window": "the steps ran inside a profiler trace window (the profiler was writing the trace)",
    "profiler_busy": "the profiler was busy with another session (e.g. keras.callbacks.TensorBoard(profile_batch=...))",
    "probes_off": "compile probes are off by design here (e.g. under MultiWorkerMirroredStrategy)",
    "not_measured": "the probe ran but could not time the compiles",
    "unprobed": "no compile probe ran for those calls",
    "probe_budget": (
        "the compile probes had used their budget (1% of the monitored time and 0.1 s): each compile is "
        "known by its new input shape and timed from its step"
    ),
}


@dataclass
class Compilation:
    """One compiled XLA module.

    The report's records (``report.compilations``), capped at ``max_records`` per phase (the counts
    stay exact); built by the monitor, read by you.

    Args:
        phase: "train", "test" or "predict".
        step: 1-based global step of the phase at which it compiled.
        signature: the input signature that made it compile.
        seconds: compile time; from the XLA compiler's events when
            ``source == "profiler"``, from the span of the op that triggered
            the compile when ``"op_span"`` (TensorFlow 2.16/2.17 on CPU, whose
            compiler emits no events), from JAX's own compile events when
            ``"jax"`` (tracing + lowering + XLA compile of the step), else
            (``"timing"``) step time minus the steady median.
        source: "profiler", "op_span", "jax" or "timing".
        cached: served from the persistent compilation cache (None: unknown,
            when a probe that cannot see the compiler saw a mix of loads and
            compiles).
        step_seconds: wall time of the whole step that compiled.
        traced: the step also traced the tf.function (first step of a function),
            so a timing estimate includes tracing.
        call_batches: batches the step function's call ran (more than 1 under
            ``steps_per_execution``).
        call_compiles: compiles in that call (a timing estimate shares the
            call's excess time among them).
        last_batch: the step was the last of its epoch (train) or of its
            evaluate / predict run: a partial last batch compiles there.
        estimated_because: why a ``"timing"`` record is an estimate, one of
            ``ESTIMATED_BECAUSE``'s keys ("trace_window", "profiler_busy", "probes_off",
            "not_measured", "unprobed"); None for a measured record.
        cost: what the program costs (FLOPs, bytes, memory: a ``ProgramCost``), analysed off the step
            path after it compiled; None when it was not analysed (``XlaMonitor(cost="off")``, past the
            per-fit cap, or a record read from a report older than schema 9).
        cause: why XLA compiled (``xla_keras.core.types.CAUSES``): ``"signature"`` (an input signature new to
            the phase: a shape, dtype or structure), ``"function"`` (a signature seen before, new to a rebuilt
            step function), ``"value"`` (a known signature, with a new value of an input XLA takes as a
            compile-time constant), ``"retrace"``, ``"context"`` and ``"placement"`` (JAX: its tracing context,
            or the arrays' placement or weak types, changed), ``"unknown"``; None in a report older than
            schema 13.
        why: the cause in words, for a compile at a known signature (the op, the input, the layer and the
            user's line for a value; JAX's own words for a context); None for a new signature (the
            signature says it).
        outside_step: the one-off program the module was compiled for when it is not the step's own:
            ``"initialize_variables"`` (TensorFlow's initialiser of the variables the step's first trace
            created, such as the optimizer's slots: under auto-clustering its clusters compile at the
            first step, and it runs once). Such a module counts in ``compilation_count`` and
            ``compile_seconds`` (XLA compiled it), not in the compile budget; the ledger shows it apart.
            None for the step's own program (and in older reports).
        precompiled: compiled before the phase's first step (``XlaMonitor(precompile=...)``), at step 0; its
            ``seconds`` by ``source`` ("jax": JAX's trace, lowering and compile events; "profiler" /
            "op_span": TensorFlow's probe around the zero-batch step; "timing": that step's wall time).

    Example:
        `monitor`: the monitor of XlaMonitor's example, after its fit of 2 batches of 32.

        ```pycon
        >>> compilation = monitor.report.compilations[0]
        >>> compilation.phase, compilation.step, compilation.last_batch
        ('train', 1, False)
        >>> [(leaf.path, leaf.shape) for leaf in compilation.signature]
        [('x', (32, 4)), ('y', (32, 1))]

        ```
    """

    phase: str
    step: int
    signature: InputSignature = field(metadata=converters(to_jsonable, from_jsonable))
    seconds: float
    source: str
    cached: Optional[bool] = False
    step_seconds: Optional[float] = None
    traced: bool = False
    call_batches: int = 1
    call_compiles: int = 1
    last_batch: bool = False
    estimated_because: Optional[str] = None
    cost: Optional[ProgramCost] = field(metadata=converters(plain, ProgramCost.from_dict), default=None)
    cause: Optional[str] = None
    why: Optional[str] = None
    outside_step: Optional[str] = None
    precompiled: bool = False

    def to_dict(self) -> Dict[str, Any]:
        """This compile as the report's JSON holds it.

        Returns:
            A dict of the fields; the signature as ``[{"path", "dtype", "shape"}]``.
        """
        return record_dict(self)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Compilation":
        """A compile read back from ``to_dict()``'s form.

        By key, never by position: unknown keys are ignored, optional ones take their defaults.

        Args:
            d: a dict as ``to_dict()`` writes it.

        Returns:
            A ``Compilation``.
        """
        return record_from_dict(cls, d)

    def estimate_from(self, steady_seconds: Optional[float]) -> float:
        """The timing-fallback estimate: this compile's share of the time its
        call (``call_batches`` batches, ``call_compiles`` new signatures) ran
        above the steady median."""
        if self.step_seconds is None:
            return self.seconds
        steady_call = None if steady_seconds is None else self.call_batches * steady_seconds
        return excess_over_steady(self.step_seconds, steady_call) / max(1, self.call_compiles)


@dataclass
class SlowStep:
    """A step far above the steady median whose input signature was already compiled.

    Something cost time that the compile ledger cannot name (a host stall, garbage collection, a
    tf.data pipeline that waited). A step is slow when it took more than 5 times its phase's steady
    median and more than 20 ms above it. The report keeps them in ``report.slow_steps`` (capped
    at ``max_records`` per phase; ``report.slow_step_count`` counts them all).

    Args:
        phase: "train", "test" or "predict".
        step: 1-based global step of the phase.
        seconds: the step's time, measured as ``basis`` says.
        steady_seconds: the phase's steady step then.
        signature: the step's input signature (compiled before).
        basis: what ``seconds`` is. "step" (TensorFlow): the step's own time, from the batch end before it
            to its own (Keras syncs with the device at every batch end). "host" (JAX, whose steps are
            dispatched asynchronously): the time the training loop spent on the step, from its start to the
            next step's: pulling its batch, dispatching it and the callbacks between steps, and, when the
            device's queue is full, the wait for an earlier step to finish; the device may have hidden part
            of a host stall behind the steps it still had queued.
        where: where the time went (TensorFlow, whose parts of a step are timed): ``"input"`` (the input
            pipeline's wait: the step wrapper pulls the batch), ``"between_steps"`` (Keras's loop and the other
            callbacks between the last step's end and this one's start) or ``"step"`` (the step itself: the
            device, or the host busy); None where it is not known (JAX, or a report older than schema 13).
        input_seconds: the input pipeline's wait in that step, or None.
        between_seconds: the time between the last step's end and this one's start, or None.

    Example:
        A record as a saved report holds it (``report.to_dict()["slow_steps"]``), read back:

        ```pycon
        >>> slow = xla_keras.SlowStep.from_dict({"phase": "train", "step": 40, "seconds": 0.3,
        ...     "steady_seconds": 0.002, "signature": [{"path": "x", "dtype": "float32", "shape": [32, 4]}]})
        >>> round(slow.seconds / slow.steady_seconds)  # times the steady step
        150
        >>> slow.signature[0].shape
        (32, 4)

        ```
    """

    phase: str
    step: int
    seconds: float
    steady_seconds: float
    signature: InputSignature = field(metadata=converters(to_jsonable, from_jsonable))
    basis: str = "step"
    where: Optional[str] = None
    input_seconds: Optional[float] = None
    between_seconds: Optional[float] = None

    def to_dict(self) -> Dict[str, Any]:
        """This slow step as the report's JSON holds it.

        Returns:
            A dict of the fields; the signature as ``[{"path", "dtype", "shape"}]``.
        """
        return record_dict(self)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "SlowStep":
        """A slow step read back from ``to_dict()``'s form (unknown keys are ignored).

        Args:
            d: a dict as ``to_dict()`` writes it.

        Returns:
            A ``SlowStep``.
        """
        return record_from_dict(cls, d)


SCHEMA_VERSION = 13  # see schema.py for what each version added


@dataclass
class XlaReport:
    """What XLA did in the monitored calls and what it cost.

    ``str(report)`` is the human summary; ``to_dict()`` is JSON-able. The monitor builds it
    (``monitor.report``); ``parse_report`` reads one back from ``xla_report.json``. Phases are
    ``"train"``, ``"test"`` (validation and ``evaluate``) and ``"predict"``; steps are 1-based and
    global per phase.

    Args:
        jit_mode: the ``jit`` the monitor was given ("keep", "on", "off", "autoclustering" or
            "fastest").
        jit_active: whether XLA compiled the steps; None when unknown (nothing ran, or the monitor
            stepped aside).
        jit_reason: why, in words: what the model's step function runs with and what the probes saw.
        jit_fix: code that lets XLA compile what it did not (a layer Keras refuses to compile, with
            ``supports_jit=False``, or one holding an op XLA cannot compile, moved into the input pipeline
            and applied to every input the model reads: train, validation, evaluate and predict data; else
            ``jit="autoclustering"``), in lines of at most 96 characters, or None. Also under ``jit="keep"``
            when Keras refuses ``jit_compile=True`` for the model.
        unsupported_ops: XLA could not compile an op of the step (``on_unsupported``): ``{"phase", "step",
            "action" ("fallback" or "raise"), "device", "ops" (each ``{"op", "layer", "node"}``), "layers",
            "line" (the user's source line), "why", "error" (the framework's words), "fix"}``; else None.
        coverage: auto-clustering (TensorFlow): what XLA's clusters held of the train step, its nodes from
            the step's graph as TensorFlow runs it, their times from the steady trace window: ``{"phase",
            "steps", "clusters", "share_inside" (of the op kernels' time), "inside_seconds_per_step",
            "outside_seconds_per_step", "nodes_outside", "ops_outside" (each ``{"op", "nodes", "nodes_timed"
            (those the window traced), "layers", "seconds_per_step", "share", "reason"}``, by time), "advice"
            (the op outside with the most time that has a known fix, at least 1% of the op time: ``{"op",
            "fix", "code" (or None), "effect" (what the fix does for the op)}``), "no_advice" (why there is
            none, or None), "nodes_from" ("graph", or "trace" when the graph was not kept), "counted",
            "other_phases" (why test and predict have none), "withheld" (on a GPU or TPU: why the times are
            null)}``; else None.
        compilations: the compiles, each a ``Compilation`` (at most ``max_records`` per phase).
        compilation_count: compiles per phase, exact.
        compilations_dropped: compile records beyond the ``max_records`` cap (counted, not kept).
        distinct_signatures: distinct input signatures per phase.
        storms: the recompilation storms, each a ``Storm``.
        advice: phases whose recompiles cost more than the compile budget, below the storm
            threshold, each a ``PhaseAdvice``.
        fallback: after ``on_storm="fallback"``: ``{"phase", "step", "reason", "xla_steady_step_seconds",
            "xla_steady_steps", "steady_step_seconds_after", "steady_steps_after", "cause", "steps_at_switch",
            "steps_after"}`` (cause: "storm", or "unsupported": an op XLA cannot compile; schema 12;
            steps_at_switch / steps_after: the steps each phase ran before / since the switch, schema 13);
            else None.
        jit_decision: ``jit="fastest"`` only: the mode kept and the evidence (``"mode"`` is None while
            the trial measures); None for the other modes.
        steps: steps per phase (test and predict count batches over the monitor's lifetime).
        steady_step_seconds: the train phase's steady step time: the wall time a step takes in the fit
            (intervals that begin and end with the device drained, compiles left out: their time over their
            steps), or None (not measured, or withheld: ``step_timing`` says why).
        steady_step_seconds_by_phase: the same for each phase.
        steady_step_counts: the steady steps each phase's figure rests on (0: not measured).
        step_timing: per phase, how its step times were measured: ``{"basis", "steps", "intervals",
            "withheld"}``. ``basis`` is "per_step" (TensorFlow: each step's own time is known, from one batch
            end to the next: Keras syncs with the device at every batch end; an interval is a run),
            "between_drains" (JAX, whose steps are dispatched asynchronously: intervals end where the device
            drained, at run ends and at the monitor's sparse syncs; ``intervals`` counts them) or
            "dispatch" (a JAX report of schema 9 or older: its step times were the time Python took to queue
            a step, not a step time). ``steps``: the steady steps the figure rests on. ``withheld``: why the
            phase ran steps and has no steady step (its figure is then None), else None.
        compile_seconds: the compiles' total time.
        wall_seconds: the monitored wall time (fits, standalone evaluates and predicts).
        compile_share: ``compile_seconds / wall_seconds`` (at most 1), or None before any time was
            monitored.
        slow_steps: steps far above the steady median with nothing to compile, each a ``SlowStep``
            (at most ``max_records`` per phase).
        slow_step_count: every slow step, counted.
        break_even_steps: the steps after which XLA's compiles are repaid by its faster steps; set by
            ``compare()`` and by ``jit="fastest"`` (both measure steps without XLA), else None.
        cache_saved_seconds: compile time the persistent compilation cache saved (its loads against
            the compiles they replaced), or None when unknown.
        probe: what timed the compiles: "profiler" (TensorFlow), "jax.monitoring" (JAX), "timing"
            (step time, when no probe could look), or "profiler+timing" (the profiler was busy at
            times).
        traces: the profiler trace windows saved for the Profile tab, each ``"kind: directory"``
            (``kind`` is "steady", "storm" or "range").
        notes: what else to know, in words.
        log_dir: where the report's files went, or None.
        versions: the versions that ran (``"tensorflow"`` or ``"jax"``, ``"keras"``,
            ``"xla_keras"``).
        run_state: "running" (a call was in progress when the report was built), "interrupted" (the
            last call ended by an exception, Ctrl-C or ``on_storm="raise"``), "finished", or None
            (nothing ran yet).
        backend: the Keras backend that ran: "tensorflow" or "jax".
        other_compilations: JAX: compiles kept out of the step ledger, as totals
            (``{"in_steps": {"count", "seconds"}, "outside_steps": {...}}``).
        processes: several processes in one distribution (multi-process JAX, or MultiWorkerMirroredStrategy's
            workers): each process's ``{"process", "compilation_count", "compile_seconds", "steps"}`` (per
            phase), as gathered at the last epoch end or fit end; [] in one process. The rest is this process's.
        costs: per phase with a costed program, its achieved rates at steady state (``core.program_cost.phase_rates``).
        waits: per phase, what it waited for outside its steps' own work (schema 13): ``{"input_seconds"`` (the
            input pipeline: the step wrapper times each call's pull), ``"input_share"`` (of the monitored wall
            time), ``"longest_input"``, ``"run_start_seconds"`` (from each run's begin hook to its first step:
            Keras makes the epoch's data iterator and releases the last one, other callbacks' begin hooks run),
            ``"run_starts"`` (the runs measured), ``"longest_run_start"``, ``"longest_run_start_step"}``.
        own_seconds: the monitor's own work (schema 13), kept out of every step figure: ``{"traces"`` (profiler
            trace windows started, stopped and saved), ``"writes"`` (event files and the report file),
            ``"cost"`` (the cost card's analyses), ``"probes"`` (compile probes started and stopped),
            ``"total"}``.
        outside_step_compilations: per phase with any, the modules compiled for a one-off program, not the
            step's (``Compilation.outside_step``: TensorFlow's variable initialiser under auto-clustering), as
            ``{"count", "seconds"}``; they are in ``compilation_count`` and ``compile_seconds`` too, not in
            the compile budget.
        precompile: per phase precompiled (``XlaMonitor(precompile=...)``): ``{"source"`` (where the shape set
            came from, in words; or why it is empty), ``"signatures"`` (compiled before the first step),
            ``"requested"``, ``"already"`` (of the set, compiled by the step function in an earlier call),
            ``"seconds"`` (the precompile's wall time), ``"compile_seconds"`` (the programs' own, summed),
            ``"threads"``, ``"cached"`` (served by the persistent cache), ``"failed"``, ``"left_out"``,
            ``"withheld"`` (why nothing was compiled ahead), ``"in_loop"`` (compiles of the step after it: 0
            is the goal) and ``"missed"`` (the first of those: step, signature, cause)``}``.

    Example:
        `monitor`: the monitor of XlaMonitor's example, after its fit of 2 batches of 32.

        ```pycon
        >>> report = monitor.report
        >>> report.jit_mode, report.jit_active, report.run_state
        ('on', True, 'finished')
        >>> report.steps["train"], report.compilation_count["train"], report.distinct_signatures["train"]
        (2, 1, 1)
        >>> report.storms, report.advice
        ([], [])
        >>> 0 < report.compile_seconds < report.wall_seconds
        True

        ```
    """

    jit_mode: str = "keep"
    jit_active: Optional[bool] = None
    jit_reason: str = ""
    jit_fix: Optional[str] = None
    unsupported_ops: Optional[Dict[str, Any]] = None
    coverage: Optional[Dict[str, Any]] = None
    compilations: List[Compilation] = field(
        metadata=converters(plain, _each(Compilation.from_dict)), default_factory=list
    )
    compilation_count: Dict[str, int] = field(default_factory=lambda: dict.fromkeys(PHASES, 0))
    compilations_dropped: int = 0
    distinct_signatures: Dict[str, int] = field(default_factory=lambda: dict.fromkeys(PHASES, 0))
    storms: List[Storm] = field(metadata=converters(plain, _each(Storm.from_dict)), default_factory=list)
    advice: List[PhaseAdvice] = field(metadata=converters(plain, _each(PhaseAdvice.from_dict)), default_factory=list)
    fallback: Optional[Dict[str, Any]] = None
    jit_decision: Optional[Dict[str, Any]] = None
    steps: Dict[str, int] = field(default_factory=lambda: dict.fromkeys(PHASES, 0))
    steady_step_seconds: Optional[float] = None
    steady_step_seconds_by_phase: Dict[str, Optional[float]] = field(default_factory=lambda: dict.fromkeys(PHASES))
    steady_step_counts: Dict[str, int] = field(default_factory=lambda: dict.fromkeys(PHASES, 0))
    step_timing: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    compile_seconds: float = 0.0
    wall_seconds: float = 0.0
    compile_share: Optional[float] = None
    slow_steps: List[SlowStep] = field(metadata=converters(plain, _each(SlowStep.from_dict)), default_factory=list)
    slow_step_count: int = 0
    break_even_steps: Optional[float] = field(metadata=converters(_finite_or_none, plain), default=None)
    cache_saved_seconds: Optional[float] = None
    probe: str = "profiler"
    traces: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    log_dir: Optional[str] = None
    versions: Dict[str, str] = field(default_factory=dict)
    run_state: Optional[str] = None
    backend: str = "tensorflow"
    other_compilations: Dict[str, Dict[str, float]] = field(default_factory=dict)
    processes: List[Dict[str, Any]] = field(default_factory=list)
    costs: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    waits: Dict[str, Dict[str, float]] = field(default_factory=dict)
    own_seconds: Dict[str, float] = field(default_factory=dict)
    outside_step_compilations: Dict[str, Dict[str, float]] = field(default_factory=dict)
    precompile: Dict[str, Dict[str, Any]] = field(default_factory=dict)

    @property
    def total_compilations(self) -> int:
        """Compiles of every phase.

        Returns:
            The sum of ``compilation_count``.

        Example:
            ```pycon
            >>> xla_keras.XlaReport(compilation_count={"train": 2, "test": 1, "predict": 0}).total_compilations
            3

            ```
        """
        return sum(self.compilation_count.values())

    def to_dict(self) -> Dict[str, Any]:
        """The report as plain data: what ``LOG_DIR/xla_report.json`` holds.

        Keys are only ever added, never renamed; ``schema_version`` says which were there.

        Returns:
            A JSON-able dict.

        Example:
            ```pycon
            >>> data = xla_keras.XlaReport(jit_mode="on").to_dict()
            >>> data["schema_version"] == xla_keras.report.model.SCHEMA_VERSION
            True
            >>> data["jit_mode"], data["compilation_count"]
            ('on', {'train': 0, 'test': 0, 'predict': 0})

            ```
        """
        return {"schema_version": SCHEMA_VERSION, **record_dict(self)}

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "XlaReport":
        """A report read back from ``to_dict()``'s form, of this schema version.

        Unknown keys are ignored and missing ones take their defaults; ``parse_report`` reads any
        schema version and says when a report is newer than this xla_keras.

        Args:
            d: a dict as ``to_dict()`` writes it.

        Returns:
            An ``XlaReport``.

        Example:
            ```pycon
            >>> report = xla_keras.XlaReport(jit_mode="on", notes=["a note"])
            >>> xla_keras.XlaReport.from_dict(report.to_dict()) == report
            True

            ```
        """
        return record_from_dict(cls, d)

    def to_json(self) -> str:
        """The report as JSON text (``to_dict()``, indented, keys sorted).

        Returns:
            A str.

        Example:
            ```pycon
            >>> xla_keras.XlaReport().to_json().splitlines()[:3]
            ['{', '  "advice": [],', '  "backend": "tensorflow",']

            ```
        """
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "XlaReport":
        """A report read back from ``to_json()``'s text.

        Args:
            text: JSON text, as ``to_json()`` writes it.

        Returns:
            An ``XlaReport``.

        Example:
            ```pycon
            >>> text = xla_keras.XlaReport(jit_mode="off").to_json()
            >>> xla_keras.XlaReport.from_json(text).jit_mode
            'off'

            ```
        """
        return cls.from_dict(json.loads(text))

    def __str__(self) -> str:
        return render(self)

    def summary(self, where: str = "monitor.report") -> str:
        """The end-of-fit summary ``XlaMonitor(verbose=1)`` prints: at most 12 lines of 100 characters.

        Args:
            where: the expression that holds this report, for the lines that point into it.

        Returns:
            The summary, a str of at most 12 lines.

        Example:
            ```pycon
            >>> report = xla_keras.XlaReport(jit_mode="on", jit_active=True, steps={"train": 12})
            >>> print(report.summary())  # doctest: +NORMALIZE_WHITESPACE
            xla_keras: XLA ran (jit='on'); compiles: train 0
              compile time : 0 ms
              steady step  : not measured
              more         : print(monitor.report)

            ```
        """
        return summary(self, where)

    def details(self) -> str:
        """The summary with every storm's and advice's full text and every note whole, in 100 columns.

        ``str(report)`` trims them to their headline and fix.

        Returns:
            The text ``xla-keras report --full LOGDIR`` prints.

        Example:
            ```pycon
            >>> xla_keras.XlaReport(notes=["a note " * 40]).details().count("note:")
            1

            ```
        """
        return render(self, full=True)

    def to_markdown(self) -> str:
        """The summary as Markdown, for TensorBoard's Text tab (the ``xla/report`` tag).

        Returns:
            A Markdown str: the verdict, a table of the phases, the compile time and break-even,
                then any storms and advice.

        Example:
            ```pycon
            >>> markdown = xla_keras.XlaReport(jit_mode="on", jit_active=True).to_markdown()
            >>> print(markdown.splitlines()[0])
            ## XLA report

            ```
        """
        return render_markdown(self)
