"""An op XLA cannot compile, met where XLA compiles the whole step: what it is, where, and the fix. Pure.

Under ``jit="on"`` (or the user's own ``compile(jit_compile=True)``) TensorFlow fails the step's compile
when an op has no XLA kernel for the device ("Detected unsupported operations when trying to compile
graph ..."), and Keras's JAX backend fails the step's trace when a layer's output shape depends on the
data or a layer pulls a tracer into numpy. Each backend reads its framework's error into an
``Unsupported`` (``backends/<name>/jit.py``: ``unsupported_op``); the monitor then falls back (the step
rebuilt without XLA, the same batches run again: no step lost) or raises ``UnsupportedOpError``, as
``on_unsupported`` says (``callback/unsupported_action.py``).
"""

from __future__ import annotations

import os
import sysconfig
import textwrap
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterable, Optional, Tuple

from xla_keras.core.messages import WIDTH, library_file, within

ON_UNSUPPORTED = ("fallback", "raise")
# What XLA refused (``Unsupported.kind``): an op with no XLA kernel, an input it needs as a compile-time
# constant, or the step's compile for another reason.
REFUSALS = ("op", "constant", "compile")
JAX_DEVICE = "jax.jit"  # where JAX's step fails: its trace, before XLA sees it

# Where TensorFlow's or JAX's decisive line is quoted: enough to recognise it, not its 2,000 characters.
QUOTE_CHARACTERS = 300


@dataclass(frozen=True)
class UnsupportedOp:
    """One op XLA could not compile.

    Args:
        op: TensorFlow's op type (``"AsString"``), or the error JAX raised while tracing
            (``"ConcretizationTypeError"``).
        layer: the model's layer it belongs to (by name), or None when no layer could be named.
        node: TensorFlow's node name (``"functional_1/dedup_1/AsString"``), or (JAX) the user's source line.
    """

    op: str
    layer: Optional[str]
    node: str


@dataclass(frozen=True)
class Unsupported:
    """What stopped XLA: the ops, the device type, the user's line, the framework's own words.

    Args:
        ops: the ops XLA could not compile (one per op TensorFlow named; one for JAX).
        device: TensorFlow's XLA device type (``"XLA_CPU_JIT"``), or ``"jax.jit"``.
        line: the user's source line that made the op (``"model.py:8 in call"``), or None.
        error: the framework's decisive line, quoted (at most ``QUOTE_CHARACTERS``).
        why: in words, why XLA cannot compile it (the reason this kind of op fails).
        raised: the framework's own error, where the one the step raised wraps it (Keras re-raising JAX's).
        input_dtype: TensorFlow: the dtype of the step's own input XLA takes no tensor of (its op is
            ``_Arg``: a string input), or None.
        kind: what XLA refused (``REFUSALS``): ``"op"`` (no XLA kernel for the op, or a JAX trace error),
            ``"constant"`` (an op's input XLA needs as a compile-time constant, which the step computes from
            its data: ``input`` names it), ``"compile"`` (XLA failed to compile the step for another reason,
            in its own words).
        input: for ``"constant"``: the op's input XLA needs as a constant (``"limit"``, or ``"input 1"``).
        fix_words: the fix for this kind of error in words, where the reading backend knows it (JAX: one
            per trace error it raised), or None.
    """

    ops: Tuple[UnsupportedOp, ...]
    device: str
    line: Optional[str]
    error: str
    why: str
    input_dtype: Optional[str] = None
    fix_words: Optional[str] = None
    raised: Optional[BaseException] = field(default=None, compare=False, repr=False)  # the framework's own
    kind: str = "op"
    input: Optional[str] = None

    @property
    def layers(self) -> Tuple[str, ...]:
        """The layers named, once each, in the order met."""
        return tuple(dict.fromkeys(op.layer for op in self.ops if op.layer))

    def what(self) -> str:
        """The ops and their layers in a few words: ``AsString in layer 'dedup'`` (TensorFlow), ``layer 'odd'
        (ConcretizationTypeError)`` (JAX: the error names no op; the user's line does)."""
        if self.kind == "compile":
            first = self.ops[0] if self.ops else None
            if first is not None and first.op != "XLA":
                where = f" in layer {first.layer!r}" if first.layer else ""
                return f"the step ({first.op}'s {self.input}{where})"
            return "the step"
        parts = []
        for op, layer in dict.fromkeys((op.op, op.layer) for op in self.ops):
            if self.kind == "constant":
                parts.append(f"{op}'s {self.input}" + (f" in layer {layer!r}" if layer else ""))
            elif self.device == JAX_DEVICE:
                parts.append(f"layer {layer!r} ({op})" if layer else f"the step ({op})")
            elif op == "_Arg" and self.input_dtype:
                parts.append(f"the step's {self.input_dtype} input (_Arg)")
            else:
                parts.append(f"{op} in layer {layer!r}" if layer else op)
        return ", ".join(parts)

    def record(self, phase: str, step: int, action: str, fix: Optional[str]) -> Dict[str, Any]:
        """The report's ``unsupported_ops``: JSON-able, keyed as documented in docs/report-schema.md."""
        return {
            "phase": phase,
            "step": step,
            "action": action,
            "device": self.device,
            "ops": [asdict(op) for op in self.ops],
            "layers": list(self.layers),
            "line": self.line,
            "why": self.why,
            "input_dtype": self.input_dtype,
            "error": self.error,
            "fix": fix,
            "kind": self.kind,
            "input": self.input,
        }


def quote(text: str) -> str:
    """One line of a framework's error, cut to ``QUOTE_CHARACTERS``."""
    line = " ".join(text.split())
    return line if len(line) <= QUOTE_CHARACTERS else line[: QUOTE_CHARACTERS - 1] + "…"


def layer_named(components: Any, names: Any) -> Optional[str]:
    """The innermost of ``components`` (a node's name scopes, outermost first) that names one of the
    model's layers. TensorFlow adds a ``_N`` suffix to every layer's scope in the traced step (measured:
    layers ``dense``, ``dense_1`` run in scopes ``dense_1``, ``dense_1_2``), so a component is first read
    without its suffix; as it stands only where it has none to strip."""
    known = set(names)
    for component in reversed(list(components)):
        base, _, suffix = component.rpartition("_")
        if base and suffix.isdigit():
            if base in known:
                return base
        elif component in known:
            return component
    return None


def quoted_root(paths: Iterable[str]) -> Optional[str]:
    """The prefix TensorFlow cut from the paths of a stack it quotes (their common directory: ``/`` when
    they share nothing else, ``/tmp/`` for a clone and a venv both under /tmp), found from a quoted path
    of an installed package whose real file is known. None when none can be placed."""
    for path in paths:
        head, marker, rest = path.partition("site-packages/")
        if not marker:
            continue
        for library in dict.fromkeys(sysconfig.get_paths()[key] for key in ("purelib", "platlib")):
            real = os.path.join(library, rest)
            if os.path.exists(real) and real.endswith(path):
                return real[: len(real) - len(path)]
    return None


def user_line(frames: Iterable[Tuple[str, int, str]], root: Optional[str] = None) -> Optional[str]:
    """The innermost of ``frames`` (``(file, line, function)``, outermost first) in the user's own code:
    not in the standard library, an installed package or xla_keras. ``root``: the prefix the paths lost
    (``quoted_root``: TensorFlow quotes them so), put back."""
    for filename, line, function in reversed(list(frames)):
        path = filename
        if root and not os.path.isabs(path) and os.path.exists(os.path.join(root, path)):
            path = os.path.join(root, path)
        if path.startswith("<") or library_file(path):
            continue
        return f"{path}:{line} in {function}"
    return None


def reason_words(found: Unsupported, phase: str, step: int, action: str, move_words: Optional[str]) -> str:
    """The report's ``jit_reason`` after the op was met: what stopped XLA, where, what happened, the fix."""
    where = f" (your line: {found.line})" if found.line else ""
    done = (
        "the step was rebuilt without XLA to run the same batches again (on_unsupported='fallback'): "
        "XLA fails before the step runs, so no step is lost"
        if action == "fallback"
        else "the call stopped (on_unsupported='raise')"
    )
    fix = f". Fix: {move_words}" if move_words else ""
    on = f" on {found.device}" if found.device != "XLA" else ""
    what = f"XLA cannot compile {found.what()}{on}{where}: {found.why}"
    return f"{what}; at {phase} step {step} {done}{fix}"


def warning_lines(found: Unsupported, phase: str, step: int, run: str, fix_words: str) -> str:
    """The one warning of a fallback: 4 lines of at most ``WIDTH`` characters (the optional parts give way)."""
    device = f" ({found.device})" if found.device != "XLA" else ""
    head = within(f"XLA cannot compile {found.what()} at {phase} step {step}", device, f": {found.why}")
    lines = [
        head,
        f"This {run} goes on without XLA (on_unsupported='fallback'): the step runs again, no step lost.",
        f"Fix: {fix_words}",
        "More: monitor.report.unsupported_ops, monitor.report.jit_reason",
    ]
    return "\n".join(line if len(line) <= WIDTH else line[: WIDTH - 1] + "…" for line in lines)


def autoclustering_fix(found: Unsupported) -> str:
    """TensorFlow, when no layer can move into the input pipeline: auto-clustering compiles the rest of
    the step with XLA and leaves the ops it cannot compile to TensorFlow."""
    said = (
        f"xla_keras: XLA cannot compile {found.what()} ({found.device}), so no step is one XLA program. "
        "Auto-clustering compiles the rest of the step with XLA and leaves that op to TensorFlow."
    )
    return "\n".join(
        [
            *textwrap.wrap(said, width=96, initial_indent="# ", subsequent_indent="# "),  # 4 to indent it
            "import xla_keras",
            "xla_keras.configure(cpu_autoclustering=True)  # CPU: right after import, before any model",
            'monitor = xla_keras.XlaMonitor(jit="autoclustering")',
            "model.fit(..., callbacks=[monitor])",
        ]
    )
