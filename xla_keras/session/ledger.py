"""Which steps compiled: the per-phase ledger of signatures compiled by the running function. Pure.

:class:`CompileLedger` decides which steps need a probe (a signature new to
the function that runs) and keeps the records, with exact counts and a cap on
the detailed records. Backend-neutral: each backend's probe measures the
seconds (TensorFlow's trace in ``backends/tensorflow/trace_events.py``).
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from xla_keras.core.signatures import InputSignature, fingerprint


class CompileLedger:
    """Per phase: which signatures the running function has already compiled.

    XLA's cache lives as long as the function does, so the set of known
    signatures is reset whenever the phase's step function is replaced (a
    rebuilt train function compiles everything again). Distinct signatures
    over the monitor's lifetime are counted exactly with fingerprints; probe
    bookkeeping is bounded by the number of distinct signatures.
    """

    def __init__(self, probes_per_signature: int = 1):
        self.probes_per_signature = probes_per_signature
        self._function_token: Dict[str, object] = {}
        self._occurrences: Dict[str, Dict[int, int]] = {}
        # jit='fastest' keeps a phase's XLA and non-XLA functions and swaps them: the one swapped out keeps
        # its occurrences here, so swapping back finds its compiled signatures (at most one per phase).
        self._parked: Dict[str, Tuple[object, Dict[int, int]]] = {}
        self._lifetime: Dict[str, set] = {}
        # Per phase: the signatures precompiled for the running function (before its first step).
        self._ahead: Dict[str, set] = {}
        self.last_fingerprint = 0  # of the signature last observed
        self.last_known = False  # whether it had been seen before (any function)
        self.last_ahead = False  # whether it was precompiled and this is its first batch

    def function(self, phase: str) -> object:
        """The function last declared for ``phase`` (None if none)."""
        return self._function_token.get(phase)

    def set_function(self, phase: str, token: object, keep_previous: bool = False) -> bool:
        """Declare the function that runs ``phase``; True if it is a new one. ``keep_previous``: the
        function it replaces is kept alive (jit='fastest') and may come back with its XLA cache."""
        if phase in self._function_token and self._function_token[phase] is token:
            return False
        previous = self._function_token.get(phase)
        parked = self._parked.pop(phase, None)
        if keep_previous and previous is not None:
            self._parked[phase] = (previous, self._occurrences.get(phase, {}))
        self._function_token[phase] = token
        self._occurrences[phase] = parked[1] if parked is not None and parked[0] is token else {}
        self._ahead.pop(phase, None)  # a new function's cache holds none of them
        return True

    def precompiled(self, phase: str, signature: InputSignature) -> None:
        """The running function of ``phase`` compiled ``signature`` before its first step: its batches are
        not new to it."""
        self._ahead.setdefault(phase, set()).add(fingerprint(signature))

    def precompiled_count(self, phase: str) -> int:
        return len(self._ahead.get(phase, ()))

    def known(self, phase: str, token: object) -> set:
        """Fingerprints the function ``token`` has compiled (it runs ``phase`` now, or is parked)."""
        if token is None:
            return set()
        if self._function_token.get(phase) is token:
            return set(self._occurrences.get(phase, ())) | self._ahead.get(phase, set())
        parked = self._parked.get(phase)
        return set(parked[1]) if parked is not None and parked[0] is token else set()

    def drop_parked(self) -> None:
        """The fit ended: functions swapped out are released."""
        self._parked.clear()

    def observe(self, phase: str, signature: InputSignature) -> Tuple[bool, bool]:
        """Record one batch. Returns (new to this function, worth probing).

        Under auto-clustering a new signature of an already-run cluster
        compiles only on its second request (TF's lazy compilation), so a
        signature stays worth probing for its first ``probes_per_signature``
        occurrences.
        """
        fp = self.last_fingerprint = fingerprint(signature)
        lifetime = self._lifetime.setdefault(phase, set())
        self.last_known = fp in lifetime  # seen before, under any function of the phase
        lifetime.add(fp)
        seen = self._occurrences.setdefault(phase, {})
        count = seen.get(fp, 0)
        seen[fp] = count + 1
        ahead = fp in self._ahead.get(phase, ())
        self.last_ahead = ahead and count == 0
        return count == 0 and not ahead, count < self.probes_per_signature

    def repeat(self, phase: str, fp: Optional[int], ragged: set) -> bool:
        """One more batch of the signature last observed in ``phase`` (fingerprint ``fp``), when it is
        known to the current function and not ragged (ragged ones are probed for new split values):
        True, and counted like ``observe``; else False (the caller observes it in full)."""
        seen = self._occurrences.get(phase)
        if fp is None or fp in ragged or not seen or fp not in seen:
            return False
        seen[fp] += 1
        self.last_fingerprint, self.last_known = fp, True
        return True

    def occurrences(self, phase: str) -> Dict[int, int]:
        """The running function's batch counts by fingerprint (the steady lane counts into it)."""
        return self._occurrences.setdefault(phase, {})

    def forget(self, phase: str, signature: InputSignature) -> None:
        """Undo one ``observe`` of a step that did not finish: its signature
        is new to the function again (the distinct count is kept)."""
        seen = self._occurrences.get(phase, {})
        fp = fingerprint(signature)
        if seen.get(fp, 0) <= 1:
            seen.pop(fp, None)
        else:
            seen[fp] -= 1

    def distinct_count(self, phase: str) -> int:
        return len(self._lifetime.get(phase, ()))

    def distinct_signatures(self) -> Dict[str, int]:
        return {phase: len(self._lifetime.get(phase, ())) for phase in ("train", "test", "predict")}
