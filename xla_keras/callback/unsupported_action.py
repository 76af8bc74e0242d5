"""What the monitor does when XLA cannot compile an op of the step (``jit/unsupported.py``): fall back
(the step rebuilt without XLA, the same batches run again: no step lost, no batch skipped) or raise
``UnsupportedOpError`` (files flushed first), as ``on_unsupported`` says. The backend's step wrapper asks,
with the error the call raised; anything else is the user's error and goes on unchanged."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

from xla_keras.backends.chain import FUNCTION_ATTR
from xla_keras.callback.lifecycle import Lifecycle
from xla_keras.callback.state import RUN_WORD, CallState
from xla_keras.callback.step_functions import StepFunctions
from xla_keras.callback.step_path import StepPath
from xla_keras.core.messages import warn
from xla_keras.errors import UnsupportedOpError
from xla_keras.jit.unsupported import Unsupported, UnsupportedOp, reason_words, warning_lines


class UnsupportedAction:
    def __init__(self, state: CallState, functions: StepFunctions, lifecycle: Lifecycle, steps: StepPath):
        self.state = state
        self.functions = functions
        self.lifecycle = lifecycle
        self.steps = steps

    def met(self, phase: str, handle: Optional[Any], error: BaseException) -> Optional[Any]:
        """``phase``'s call raised ``error``: when it is an op XLA cannot compile, the function that runs the
        call's batches again without XLA (or ``UnsupportedOpError``); None otherwise."""
        state = self.state
        jit_state = state.current.jit_state
        model = state.model
        if not state.in_call or jit_state is None or not jit_state.active or model is None:
            return None  # only XLA's whole-step compile fails so (auto-clustering leaves such ops out)
        found = state.backend.unsupported_op(error, model)
        if found is None:
            return None
        session = state.session
        if found.kind == "compile":
            found = self._likely_value(phase, found)
        step = session.phases[phase].step + 1
        action = state.config.on_unsupported
        try:
            fix, fix_words = state.backend.unsupported_fix(model, found)
        except Exception as failed:  # noqa: BLE001 - the fix is advice: without it, the fit still goes on
            fix, fix_words = None, "monitor.report.jit_reason says what XLA could not compile"
            session.notes.add_once("unsupported-fix", f"the fix for an op XLA cannot compile failed: {failed!r}")
        record = found.record(phase, step, action, fix)
        # The warning points at the monitor's report; the report's reason (read from a saved log dir too) at its field.
        reason_fix = f"{fix_words}: the report's jit_fix has the code" if fix else fix_words
        reason = reason_words(found, phase, step, action, reason_fix)
        fix_words = f"{fix_words}: monitor.report.jit_fix has the code" if fix else fix_words
        # The failed call is no step: nothing ran (XLA fails before it executes), and its signatures were
        # not compiled; its probe saw no compile.
        self.steps.disarm()
        self.steps.abandon_probe(handle)
        session.call_failed(phase)
        text = warning_lines(found, phase, step, "fit" if state.in_fit else RUN_WORD[phase], fix_words)
        if action == "raise":
            state.current.jit_state = replace(jit_state, active=False, reason=reason, fix=fix, unsupported=record)
            # The files flushed, the flags put back; the call's failed batches are uncounted above.
            self.lifecycle.call_failed(phase, None, began=False, why="on_unsupported='raise'")
            said = text.splitlines()
            said[1] = "The call stops here (on_unsupported='raise'); 'fallback' would go on without XLA."
            raised = found.raised or error
            raise UnsupportedOpError("\n".join(said), raised) from raised
        self.functions.switch_off(phase, step, reason, (fix, record))
        warn(text)  # once: the call goes on, no second op can fail under XLA
        state.flush()
        # This monitor's own wrapper of the rebuilt function: monitors around this call see its batches once.
        return state.backend.wrapper(phase) or getattr(model, FUNCTION_ATTR[phase])

    def _likely_value(self, phase: str, found: Unsupported) -> Unsupported:
        """XLA failed to compile the step in its own words: when the step computes a value XLA needs as a
        compile-time constant (read from the traced graph), that op is named as the likely cause."""
        state = self.state
        signature = state.session.calls[phase].signature
        try:
            keys = state.backend.value_keys(state.model, phase, signature) if signature is not None else None
        except Exception:  # noqa: BLE001 - words only: the fallback does not need them
            keys = None
        if not keys:
            return found
        key = keys[0]
        return replace(
            found,
            ops=(UnsupportedOp(key.op, key.layer, key.node),),
            line=key.line or found.line,
            input=key.input,
            why=(
                f"{found.why}; the step computes {key.what()} from {key.source()}, a value XLA needs as a "
                "compile-time constant: the likely cause"
            ),
        )
