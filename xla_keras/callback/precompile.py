"""Precompile: a phase's shape set compiled before its first step, and every compile after it a finding.

When a watched call begins, the phases still to precompile are all of them (``CallState.precompile_due``),
and with ``precompile="auto"`` the last report in the log dir is read before this call writes its own.
At a phase's first call the step wrapper, before its batches run, hands over the first batch and a
``PrecompileRunner``; the set is resolved on that batch (``core/precompile.py``), the signatures its step
function already compiled are skipped, the rest compiled by the backend, and the session records them
at step 0 (known to the function from then on). Its time is no step's and no wait of the run's start.

After it, each compile of the step's own program is counted and kept (``report.precompile[phase]``), and
said once (``on_new_signature="warn"``) or stops the call (``"raise"``).
"""

from __future__ import annotations

import os
import zlib
from typing import Any, Callable, Optional, Sequence

from xla_keras.callback.state import CallState
from xla_keras.core.messages import warn
from xla_keras.core.precompile import resolve
from xla_keras.core.signatures import describe, fingerprint
from xla_keras.core.types import CallPlan, PrecompileRunner
from xla_keras.errors import CompileAfterPrecompileError
from xla_keras.report.model import Compilation

# (phase, text, why, error type): how the call stops (callback/storm_action.py StormAction.stop).
Stop = Callable[[str, str, str, type], None]


def set_digest(signatures: Sequence[Any]) -> int:
    """A digest of a shape set, whatever its order, exact as a float32 (24 bits): what processes compare."""
    return zlib.crc32("|".join(sorted(describe(s) for s in signatures)).encode()) & 0xFFFFFF


class Precompiler:
    def __init__(self, state: CallState, stop: Stop):
        self.state = state
        self.stop = stop
        self._said: set = set()  # the phases whose compile after a precompile was said (once each)

    def pending(self, phase: str) -> bool:
        return phase in self.state.precompile_due

    def run(self, phase: str, batch: Any, runner: PrecompileRunner) -> float:
        """Precompile ``phase``'s set on the template ``batch`` before its first step; returns the seconds it took."""
        state = self.state
        state.precompile_due.discard(phase)
        if not state.observing:
            return 0.0
        current = state.current
        session, jit = current.session, current.jit_state
        template = state.backend.signature(batch)
        shape_set = resolve(
            state.config.precompile,
            phase,
            template,
            session.applied_fixes,
            state.precompile_previous,
            state.sink.log_dir,
        )
        facts = {
            "source": shape_set.source,
            "left_out": list(shape_set.left_out),
            "threads": 0,
            "withheld": None,
        }
        withheld = None
        if not shape_set.signatures:
            withheld = f"no shape set: {shape_set.source}"
        elif jit is None or not jit.active:
            withheld = "XLA does not compile the step (jit is off): nothing to precompile"
        elif jit.autoclustering:
            withheld = "auto-clustering compiles a cluster at its second run, not its first: not precompiled"
        else:
            withheld = runner.refusal(template)
        known = session.ledger.known(phase, session.ledger.function(phase))
        # The first batch's own signature first: TensorFlow traces its step for the first shape it meets and
        # relaxes the shapes of later traces, so the set runs in the order the fit would meet it.
        ordered = sorted(shape_set.signatures, key=lambda s: s != template)
        todo = [s for s in ordered if fingerprint(s) not in known]
        facts["already"] = len(shape_set.signatures) - len(todo)  # compiled by this step function before
        if state.dist.processes > 1 and state.backend.precompiles_in_processes:
            withheld = self._agreed(withheld, todo)
        if withheld is None and not todo:  # an earlier call compiled the set: the loop is held to it all the same
            session.precompiled(phase, (), facts, 0.0)
            return 0.0
        if withheld is not None:
            facts["withheld"] = withheld
            session.precompiled(phase, (), facts, 0.0)
            if state.config.precompile != "auto" or shape_set.signatures:
                session.notes.add_once(f"precompile-{phase}", f"precompile ({phase}): {withheld}")
            return 0.0
        threads = state.config.precompile_threads or os.cpu_count() or 1
        facts["threads"] = threads if state.backend.parallel_precompile else 1
        began = session.clock()
        items = [(signature, runner.zeros(signature)) for signature in todo]
        results = runner.compile(items, threads, current.probe, jit)
        seconds = session.clock() - began
        outcome = session.precompiled(phase, results, facts, seconds)
        plan = CallPlan(phase, 0, len(items), tuple((i, 0, s) for i, (s, _) in enumerate(items)), False)
        current.costs.capture(phase, plan, [b for _, b in items], session.ledger.function(phase))
        for i, record in enumerate(outcome.compiles):
            current.cache_account.record(phase, describe(record.signature), i, record.seconds, record.cached)
        if outcome.scalars:
            state.sink.scalars(outcome.scalars)
        failed = [r for r in results if r.error is not None]
        if failed:
            session.notes.add_once(
                f"precompile-failed-{phase}",
                f"precompile ({phase}): {len(failed)} of {len(results)} signatures not compiled ahead "
                f"({describe(failed[0].signature)}: {failed[0].error})",
            )
        return seconds

    def _agreed(self, withheld: Optional[str], todo: Sequence[Any]) -> Optional[str]:
        """Every process of the distribution precompiles the same set, or none does (a process with programs
        the others lack would run alone in the loop's collectives): each gives its set's size and digest
        (a collective at the phase's first call, which every process reaches together). Returns why this
        process withholds it, or None."""
        mine = [-1.0, 0.0] if withheld is not None else [float(len(todo)), float(set_digest(todo))]
        try:
            rows = self.state.backend.gather(mine)
        except Exception as error:  # noqa: BLE001 - a peer gone: the loop's first step fails the fit anyway
            return withheld or f"the processes' sets could not be compared ({error!r:.120}): not precompiled"
        if rows is None or all(row == rows[0] for row in rows):
            return withheld
        sizes = ", ".join(
            f"process {i}: {'none' if row[0] < 0 else f'{int(row[0])} signatures'}" for i, row in enumerate(rows)
        )
        return withheld or f"the processes' sets differ ({sizes}): not precompiled in any of them"

    def compiled(self, phase: str, records: Sequence[Compilation]) -> None:
        """A call's compiles: those after a precompile of ``phase`` are counted, said once or stop the call."""
        state = self.state
        found = state.session.compiled_in_loop(phase, records)
        if not found:
            return
        record = found[0]
        cause = record.cause or "unknown"
        if cause in ("signature", "function"):
            because = "a signature the precompiled set missed"
            fix = "add this shape to XlaMonitor(precompile=...), or feed only the set's shapes"
        else:
            because = f"{cause}: {record.why}" if record.why else cause
            fix = "no shape set prevents this cause: see report.compilations[i].why"
        text = (
            f"Compile after precompile ({phase} step {record.step}): {describe(record.signature)}\n"
            f"Cause: {because}\nFix: {fix}\nMore: report.precompile[{phase!r}]['missed']"
        )
        if state.config.on_new_signature == "raise":
            self.stop(phase, text, "on_new_signature='raise' after a compile in the loop", CompileAfterPrecompileError)
        if phase not in self._said:
            self._said.add(phase)
            warn(text)
