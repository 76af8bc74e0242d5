"""JIT modes and the verdict of what really ran. Pure: backends apply the modes.

``JitState`` is what a backend read back from the step function that runs:
the report's ``jit_active`` / ``jit_reason`` start from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Literal, Optional, Sequence, Tuple, cast, get_args

# The jit modes: each backend's ``JitController.apply`` dispatches on them with an exhaustive ``match``
# ending in ``assert_never``, so mypy fails where a new mode has no branch.
JitMode = Literal["keep", "on", "off", "autoclustering", "fastest"]
MODES: Tuple[JitMode, ...] = get_args(JitMode)


def validate_mode(mode: Any, modes: Sequence[str] = MODES) -> JitMode:
    """``mode`` if it is one of ``modes`` (a backend's may be fewer), else a ValueError naming them."""
    if not isinstance(mode, str) or mode not in modes:
        raise ValueError(f"jit must be one of {', '.join(repr(m) for m in modes)}; got {mode!r}")
    return cast(JitMode, mode)


@dataclass
class JitState:
    """What the monitor asked for, what runs, and why, in words."""

    requested: JitMode
    active: Optional[bool] = None
    reason: str = ""
    autoclustering: bool = False  # clusters may compile (verified by the probe)
    fix: Optional[str] = None  # code that lets XLA compile what it did not (backends/keras/pipeline_move.py)
    unsupported: Optional[Dict[str, Any]] = None  # an op XLA cannot compile stopped it (jit/unsupported.py)

    @property
    def xla_expected(self) -> bool:
        """Whether an input signature new to the function counts as a compile."""
        return bool(self.active or self.autoclustering)

    def words(self) -> str:
        return {True: "ON", False: "OFF", None: "pending (auto-clustering: compiles will tell)"}[self.active]


def fallback_or_eager(
    mode: JitMode, fallback_reason: Optional[str], run_eagerly: bool, refusal: Optional[str], after_fallback: str = ""
) -> Optional[JitState]:
    """The read-back when nothing compiles whatever the step function is: a storm fallback switched
    XLA off for this fit, or the model runs eagerly. None otherwise (read the function)."""
    if fallback_reason:
        return JitState(mode, active=False, reason=fallback_reason + after_fallback)
    if run_eagerly:
        return JitState(
            mode, active=False, reason=refusal or "the model runs eagerly (run_eagerly=True): nothing is compiled"
        )
    return None


def fastest_as_keep(why: str) -> str:
    """jit='fastest' where only one mode can run (or one decision cannot be agreed): it acts as 'keep'."""
    return f"jit='fastest' acts as 'keep' {why}: the model's own jit_compile runs, nothing is measured"


# A layer Keras refuses jit_compile=True for, as the user put it in the model, with the layers it holds that
# declare supports_jit=False (itself among them where it declares it): ("text_vectorization",
# ("text_vectorization", "string_lookup")).
Refusing = Tuple[str, Tuple[str, ...]]


def refusing_layers(without_jit: Sequence[str], refusing: Any) -> List[Refusing]:
    """The layers Keras refuses jit_compile=True for, as the user put them in the model. ``without_jit``:
    every layer that declares supports_jit=False, nested ones included; ``refusing``: the backend's reader
    of the model's own layers that hold them, called only when there are some. A layer the reader does
    not place stands as itself."""
    if not without_jit:
        return []
    found: List[Refusing] = list(refusing())
    placed = {name for _, held in found for name in held}
    return found + [(name, (name,)) for name in without_jit if name not in placed]


def refusing_words(layers: Sequence[Refusing]) -> str:
    """``layers with supports_jit=False: text_vectorization`` (it declares it itself, and so does the
    StringLookup it holds), ``block (holding color_lookup)`` (a layer holding one)."""
    named = (name if name in held else f"{name} (holding {', '.join(held)})" for name, held in layers)
    return f"layers with supports_jit=False: {', '.join(named)}"


def keep_refused(layers: Sequence[Refusing]) -> str:
    """jit='keep' on a model Keras refuses jit_compile=True for: what runs, and that jit='on' would not help."""
    return (
        f"XLA is OFF for this fit: Keras refuses jit_compile=True for this model ({refusing_words(layers)}), "
        "so jit='on' would be refused too"
    )


def fastest_blocked(blockers: Sequence[Refusing], determinism: bool = False) -> Optional[str]:
    """Why XLA cannot run for this model at all (so there is nothing to compare), or None."""
    if blockers:
        return fastest_as_keep(f"({refusing_words(blockers)})")
    if determinism:
        return fastest_as_keep("(op determinism is enabled: Keras refuses jit_compile=True)")
    return None


def eager_refusal(mode: str) -> str:
    return f"jit={mode!r} was not applied: the model runs eagerly (run_eagerly=True), so nothing is compiled"


class SavedModelJit:
    """The model's jit_compile: set like ``compile(jit_compile=...)`` would, and saved when a storm
    fallback switches it off for one fit, to be put back afterwards. ``get_raw`` / ``set_raw`` read
    and write the stored value (None = "auto") without Keras's resolution or support check."""

    _UNSET = object()

    def __init__(self, get_raw: Any, set_raw: Any):
        self._get_raw, self._set_raw = get_raw, set_raw
        self._saved: Any = self._UNSET

    def set(self, model: Any, want: bool) -> None:
        """Store ``want`` as the model's jit_compile without Keras's check (jit='fastest' switching
        between two functions it already built)."""
        self._set_raw(model, want)

    def apply(self, model: Any, want: bool) -> bool:
        """Set jit_compile to ``want`` (when it differs); True when Keras kept it (it refuses True
        for a model that does not support XLA, with a warning we replace by our own reason)."""
        import warnings

        raw = self._get_raw(model)
        if raw is None or bool(raw) != want:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model.jit_compile = want
        return bool(self._get_raw(model)) == want

    def switch_off(self, model: Any) -> None:
        if self._saved is self._UNSET:
            self._saved = self._get_raw(model)
        model.jit_compile = False

    def restore(self, model: Any) -> bool:
        """True when the model's own setting came back (its step functions must be rebuilt)."""
        if self._saved is self._UNSET or model is None:
            return False
        self._set_raw(model, self._saved)
        self._saved = self._UNSET
        return True


@dataclass(frozen=True)
class ProbeFacts:
    """What the compile probes could see, for the verdict and the report."""

    used: bool = False  # at least one probe ran
    busy: bool = False  # the profiler was busy at least once
    off: str = ""  # why probes are off by design, e.g. "under MultiWorkerMirroredStrategy"
    blind: bool = False  # the framework's XLA compiler emits no profiler events here
    xla_ops_seen: bool = False  # an auto-clustered graph's compile op ran in a probe
    framework: str = ""  # e.g. "TensorFlow 2.16.2", for the reasons
    source: str = "profiler"  # what times compiles: the TensorFlow profiler, or "jax.monitoring"

    @property
    def label(self) -> str:
        """``report.probe``: how compile seconds were obtained."""
        if (self.busy or self.off) and not self.used:
            return "timing"
        return f"{self.source}+timing" if self.busy else self.source


def verdict(
    state: JitState, probe: ProbeFacts, *, measured: int, compiled: int, steps: int, fell_back: bool
) -> Tuple[Optional[bool], str]:
    """The report's (jit_active, jit_reason): the read-back, checked against what the probes saw.

    ``measured``: compiles a probe saw (not estimated); ``compiled``: every compile counted.
    Never says XLA is off when a probe saw it compile; under auto-clustering only compiles
    actually seen prove that XLA ran, and a probe that could not look proves nothing."""
    if measured and not state.active and not state.autoclustering:
        if fell_back:
            return False, f"{state.reason}; XLA compiled {measured} module(s) before the switch"
        return True, (
            f"{state.reason}; but the profiler saw XLA compile {measured} module(s): something "
            "else enabled XLA (e.g. TF_XLA_FLAGS=--tf_xla_auto_jit)"
        )
    if not state.autoclustering:
        return state.active, state.reason
    if compiled and measured:
        return True, f"{state.reason}; {compiled} cluster module(s) compiled (seen by the profiler)"
    if probe.off and not probe.used:
        return None, f"{state.reason}; not verified: the profiler stays off {probe.off} (see notes)"
    if probe.busy and not probe.used:
        return None, f"{state.reason}; not verified: the profiler was busy"
    if probe.blind:
        # No compiler events to read, and no cluster's compile op compiled in a probed step:
        # that may be lazy compilation or a cluster the probes missed, not proof that nothing compiled.
        return None, (
            f"{state.reason}; not verified: {probe.framework}'s XLA compiler emits no profiler events "
            "here, and no cluster's _XlaCompile op compiled in a probed step"
            + (" (clusters did run)" if probe.xla_ops_seen else "")
        )
    if steps:
        return False, (
            f"{state.reason}, but no cluster compiled: TensorFlow found nothing worth "
            "clustering, or the CPU global-jit flag was set after TensorFlow created its devices"
        )
    return None, state.reason
