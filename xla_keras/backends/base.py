"""The contract between XlaMonitor and a Keras backend. Pure: typing only.

The monitor (``monitor.py``) keeps Keras's callback hooks and wires its parts
(``callback/``); the session (``session/session.py``) keeps the statistics. What
depends on the framework under Keras lives behind this interface:

* step functions: install a wrapper around ``model.<phase>_function`` that
  reads each call's batches and reports to a ``StepObserver``; remove it;
* a compile probe: started for the calls the session asks for, it returns a
  ``CompileObservation`` (what compiled, for how long, how it was measured);
* JIT modes: apply one, read back what really runs, fall back mid-fit,
  restore what was changed;
* profiler traces, distribution facts, what ends an epoch's data, and the
  Keras call on the stack (for the callback-list guard);
* the cost card: a batch's shapes kept, and its step program's cost analysed later.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Tuple, Type

from xla_keras.core.program_cost import ProgramCost
from xla_keras.core.signatures import InputSignature
from xla_keras.core.types import CallPlan, CompileObservation, Notes, PrecompileRunner
from xla_keras.jit.modes import JitState, ProbeFacts
from xla_keras.jit.unsupported import Unsupported
from xla_keras.jit.value_keys import ValueKey
from xla_keras.session.repeats import SteadyLane


@dataclass(frozen=True)
class Distribution:
    """Facts about the model's distribution strategy."""

    name: str = "default"
    default: bool = True  # no strategy (the default one)
    replicas: int = 1
    multi_worker: bool = False
    chief: bool = True  # only the chief writes files
    # Processes the distribution spans, all running each step together (JAX: a keras.distribution whose
    # mesh holds several processes' devices); 1 otherwise. From 2, they gather their counts (``gather``).
    processes: int = 1
    process: int = 0  # this process's index among them
    # Every process sees the same input signatures at every step (JAX: a batch is one global array, of
    # the same shape everywhere), so decisions taken from signatures alone agree without a collective.
    signatures_agree: bool = False


@dataclass(frozen=True)
class Installed:
    """What ``install`` found and left in place: the step function that was
    there (``before``), the one that runs now, whether the wrapper's install
    rebuilt it, and whether XLA compiles it now (jit flag or auto-clustering)."""

    before: Any
    token: Any
    rebuilt: bool
    xla_now: bool


class CompileProbe(Protocol):
    """One report's compile probe."""

    @property
    def facts(self) -> ProbeFacts: ...

    def configure(self, cache: Optional[dict], multi_worker: bool) -> None:
        """At the start of each call: the persistent cache; whether probes must stay off."""

    def start(self, plan: CallPlan, jit: JitState) -> Optional[Any]:
        """A handle, or None when no probe can run (busy profiler: noted)."""

    def stop(self, handle: Any, plan: CallPlan, jit: JitState) -> Optional[CompileObservation]: ...

    def abandon(self, handle: Any) -> None: ...

    @property
    def compiles_outside(self) -> int:
        """Compiles seen outside the step calls so far (JAX: eager ops, metrics at a run's end; 0 where
        they cannot be seen): one inside a step-time interval is no step's time."""
        return 0


class StepObserver(Protocol):
    """What a step wrapper (and the wrapper chain) reports to and reads: the monitor."""

    quiet_phase: Optional[str]  # run this phase's next call without XLA's start-up lines (then None)
    params: Optional[dict]  # Keras's params of the running call: one dict shared by every callback of it

    @property
    def in_call(self) -> bool:
        """A fit (or a standalone evaluate / predict) is being watched."""

    @property
    def probe(self) -> Optional[CompileProbe]:
        """The compile probe of the report being written (the model watched last), if made."""

    def active(self) -> bool:
        """False: run Keras's function untouched (the monitor disabled itself)."""

    def step_wrapper(self, phase: str) -> Any:
        """The wrapper this observer installed on ``phase``'s step function, if any."""

    def call_unobserved(self, phase: str) -> None:
        """The call's data cannot be read (e.g. train_on_batch): it runs unobserved."""

    def steady_lane(self, phase: str) -> SteadyLane:
        """The lane a wrapper that ends calls itself (JAX) asks first at every call: ``take`` is all
        a steady call costs. Disarmed by the observer whenever the full path must decide."""

    def call_began(self, phase: str, batches: list, start: float, pulled: Optional[float] = None) -> Optional[Any]:
        """Batches pulled for one call (not taken by the steady lane), pulled from ``start`` on and until
        ``pulled`` (the input pipeline's wait is the difference; JAX: the previous call of the phase ends
        at ``start``, which may switch the phase's function: then ``step_wrapper`` tells). Returns a probe
        handle for ``call_ran``, or None."""

    def precompile_pending(self, phase: str) -> bool:
        """The phase's first call of a watched call, with a shape set to compile first: the wrapper then
        calls ``precompile_phase`` before ``call_began``."""

    def precompile_phase(self, phase: str, batch: Any, runner: PrecompileRunner) -> float:
        """Compile the phase's shape set before its first step, on the template ``batch`` (seconds it took:
        the wrapper starts the call after them)."""

    def call_ran(self, phase: str, probe: Optional[Any]) -> bool:
        """The call returned: stop the probe (or take the compile events a wrapper caught during a call
        the steady lane took), record what it saw. True: a wrapper that ends calls itself (JAX) waits for
        the call's outputs now and says when they were ready (``call_drained``)."""

    def call_drained(self, phase: str, at: Optional[float]) -> None:
        """The device finished every call of ``phase`` so far at ``at`` (None: waiting failed)."""

    def call_failed(self, phase: str, probe: Optional[Any], began: bool = True) -> None:
        """The call raised (the model, the data, Ctrl-C): clean up without masking the error.
        ``began``: False when pulling its batches failed (call_began never ran)."""

    def call_unsupported(self, phase: str, probe: Optional[Any], error: BaseException) -> Optional[Any]:
        """The call raised ``error`` after its batches were pulled. When XLA could not compile an op of the
        step, the function to run the same batches again with, XLA off (``on_unsupported="fallback"``), or
        ``UnsupportedOpError`` raised from ``error`` (``"raise"``); None: not such an error (the wrapper then
        reports ``call_failed`` and re-raises it)."""


class Backend(Protocol):
    """Constructed with the JIT mode; one per monitor."""

    name: str
    multi_worker_note: Optional[str]  # said once under multi-worker training (what the probe cannot do there)
    ends_calls_in_wrapper: bool  # calls end in the step wrapper; batch-end hooks may run on another thread
    probes_every_call: bool  # its probe sees every call's compiles at no cost: no call needs choosing
    parallel_precompile: bool  # its precompile compiles the set on several threads (precompile_threads)
    # Its precompile runs in every process of a distribution, once the processes agree on the set (a gather);
    # False: it precompiles in one process only.
    precompiles_in_processes: bool
    # Without XLA the step runs op by op and each op compiles per new shape (JAX): about this many
    # seconds per new shape, measured; None where ops do not compile without XLA (TensorFlow).
    op_by_op_shape_seconds: Optional[float]
    # jit='fastest': the other mode's first call against the fit's first call, by direction (to XLA on: True)
    trial_first_call: Dict[bool, float]
    cost_source: str  # where the cost card's figures come from, in words
    # What a first cost analysis is expected to take, as a share of the program's compile seconds (the cost
    # card's budget holds it to a small share of the monitored time): TensorFlow lowers the step again.
    cost_share_of_compile: float
    # profile="auto" traces the next recompiling train step after a storm opens (a window holding a compile).
    storm_trace_window: bool
    # profile="auto"'s steady window opens in a fit of any length (TensorFlow: auto-clustering's coverage reads
    # it); else only in a fit planned at MIN_FIT_STEPS_FOR_WINDOW steps or more (callback/traces.py).
    steady_window_in_short_fits: bool

    def prepare(self, owner: StepObserver) -> None:
        """At monitor construction (``owner``: the monitor, which owns the wrappers)."""

    def unsupported(self) -> Optional[str]:
        """Why this installation cannot be monitored at all (e.g. Keras too old), or None."""

    def foreign_model(self, model: Any) -> Optional[str]:
        """Why this model cannot be monitored (e.g. not a Keras 3 model), or None."""

    def versions(self) -> dict: ...

    def callback_model(self, callback: Any) -> Any:
        """The model Keras handed ``callback``, read without syncing any training state."""

    # step functions
    def signature(self, batch: Any) -> InputSignature: ...

    def per_device(self, batch: Any, signature: InputSignature) -> Optional[str]:
        """Each input's per-device shape in words, when inputs are split across devices, else None."""

    def install(self, model: Any, phase: str, observer: StepObserver, rebuild: bool = False) -> Installed: ...

    def wrapper(self, phase: str) -> Any: ...

    def wrapped_phases(self) -> List[str]: ...

    def remove(self, model: Any, phase: str) -> None: ...

    def remove_all(self, model: Any) -> None: ...

    def rebuild_functions(self, model: Any, phases: Sequence[str]) -> None:
        """Rebuild the phases' step functions in place (never None: Keras may be calling them)."""

    def drop_function(self, model: Any, phase: str) -> None:
        """Let Keras rebuild the phase's function lazily, with the current settings."""

    def function_fresh(self, model: Any, phase: str) -> Optional[bool]:
        """The phase's step function has never run (its first call traces or compiles), or None: unknown."""

    def value_keys(self, model: Any, phase: str, signature: InputSignature) -> Optional[Tuple[ValueKey, ...]]:
        """Inputs XLA takes as compile-time constants whose values the phase's step function computes from
        its arguments (``jit/value_keys.py``), read from the graphs traced since the last call; None when
        nothing was traced since (``signature``: a batch's, to name the step's inputs)."""

    # compile probe, persistent cache
    def probe(self, notes: Notes, model: Any, multi_worker: bool) -> CompileProbe: ...

    def compiles_outside_steps(self, probe: CompileProbe) -> Dict[str, dict]:
        """Compiles the probe saw outside the step functions (JAX: helpers, metrics), by kind; {} if none."""

    def cache(self) -> Optional[dict]:
        """The persistent compilation cache, ``{"dir", "effective"}``, or None."""

    # jit
    def apply_jit(self, model: Any) -> bool:
        """Apply the mode; True when every step function must be rebuilt."""

    def read_back(self, model: Any, phase: str) -> JitState: ...

    def fall_back(self, model: Any, reason: str, unsupported: Optional[Tuple[Optional[str], dict]] = None) -> None:
        """XLA off for the rest of this fit: after a storm, or after an op XLA cannot compile (``unsupported``:
        the fix's code and the report's record, read back with the mode)."""

    def layer_names(self, model: Any) -> List[str]:
        """Every layer's name, nested ones included."""

    def layer_kinds(self, model: Any) -> Tuple[str, ...]:
        """The class names of the model's layers, nested ones included, each once: facts for the storm
        advice (which layers pool or normalise over zero-padded images)."""

    def trace_coverage(self, session_dir: str, layer_names: Sequence[str], steps: int) -> Optional[dict]:
        """Auto-clustering's coverage of the train step from a saved trace window (``jit/coverage.py``), or None."""

    def unsupported_op(self, error: BaseException, model: Any) -> Optional[Unsupported]:
        """An op XLA cannot compile, read from the error a step raised; None: the error is something else."""

    def unsupported_fix(self, model: Any, found: Unsupported) -> Tuple[Optional[str], str]:
        """The fix for ``found``: as code (or None), and in words."""

    def restore_jit(self, model: Any = None) -> bool:
        """Put back what was changed; True when the model's setting came back (rebuild its functions)."""

    @property
    def jit_refusal(self) -> Optional[str]: ...

    # jit='fastest'
    def set_fastest_start(self, on: Optional[bool]) -> None:
        """The mode the next ``apply_jit`` starts the model in (a kept decision), or None: Keras's own."""

    def auto_jit(self, model: Any) -> bool:
        """Keras's own jit_compile='auto' for this model here."""

    def fit_validates(self, model: Any) -> bool:
        """The running fit validates."""

    def switch_jit(self, model: Any, phase: str, on: bool, observer: StepObserver) -> Installed:
        """Run ``phase`` with XLA ``on`` or off, keeping both of Keras's functions."""

    def settle_kept(self, model: Any, on: bool) -> None:
        """The fit ended: each phase keeps the function of the mode kept, the other is released."""

    # traces, distribution, data, the running call
    def start_trace(self, directory: str) -> None: ...

    def stop_trace(self) -> Optional[Callable[[], None]]:
        """Stop the trace window: None when it is saved, else the function that saves it (it can wait)."""

    def keras_profile_windows(self, model: Any) -> List[Tuple[int, int]]: ...

    def distribution(self, model: Any) -> Distribution: ...

    def train_step(self, model: Any) -> int:
        """The model's optimizer step count (read once per fit)."""

    def end_of_data(self) -> Tuple[Type[BaseException], ...]:
        """What ends an epoch's data, in Keras's eyes (no error: it goes on after those)."""

    def data_kind(self, model: Any) -> str:
        """What the running call's data is, for a storm fix's code: one of ``storms.fixes.DATA_KINDS``."""

    def running_callback_list(self, model: Any) -> Any: ...

    def running_fit(self, model: Any) -> Any: ...

    def batch_begin_hooks_in_use(self, callback_list: Any) -> Tuple[str, ...]:
        """The batch-begin hooks some callback of the running call's list overrides (guarded too)."""

    def multi_worker_fit_problem(self) -> Optional[str]:
        """Why Keras's own fit will fail in the multi-worker cluster the environment describes, or None."""

    def gather(self, values: Sequence[float]) -> Optional[List[List[float]]]:
        """Every process's ``values`` (as long as this one's), in process order: a collective, so every
        process of the distribution must call it at the same point. None where there is none."""

    def wait_for(self, outputs: Any) -> bool:
        """Block until the device finished the call that returned ``outputs`` (a step function's return
        value); False when waiting failed. Only where steps are dispatched asynchronously (JAX)."""

    def cost_spec(self, batch: Any) -> Any:
        """The batch's shapes and dtypes, without its values: kept for ``program_cost`` later."""

    def program_cost(self, model: Any, phase: str, spec: Any, mode: str, notes: Notes) -> ProgramCost:
        """What the phase's step program for ``spec``'s shapes costs, off the step path (``core/program_cost.py``).
        ``mode`` "auto" never compiles again; "full" may, for figures only a compile gives (said in
        ``source``). Unavailable figures are None; what the user should know goes to ``notes``."""

    def device_kind(self) -> str:
        """The name of the device the steps run on (for the peak table), or "" when unknown."""


class BackendClass(Protocol):
    """A backend's class, as ``backends.backend_for`` returns it: its JIT modes, and made with a JIT mode."""

    jit_modes: Tuple[str, ...]  # the JIT modes this backend accepts (a class attribute)

    def __call__(self, jit_mode: str = "keep") -> Backend: ...


# What every backend's profiler says when it cannot start.


class ProfilerBusy(RuntimeError):
    """Another profiler session (e.g. keras.callbacks.TensorBoard's) is running."""
