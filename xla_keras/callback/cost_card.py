"""The cost card for one model's report: what each compiled program costs, measured off the step path.

At a call with a new signature the step path keeps the batch's shapes (``capture``: the backend's
``cost_spec``, never the values); at an epoch end and at the end of a call the backend analyses each
kept program once (``analyse``: ``program_cost``) and the ledger's records of that signature get the
figures. At most one analysis per distinct signature and ``ANALYSES_PER_CALL`` per phase of a fit (a storm's
programs past the first few are not analysed, and a note says so), and ``ANALYSES_PER_CALL`` more among the
programs past that cap that ran again: the steps the achieved rates rest on ran them, and a rate is withheld
while a program that ran steps has no FLOPs. An analysis that fails leaves the figures unavailable, with the
reason: it never stops training.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional, Tuple

from xla_keras.backends.base import Backend
from xla_keras.core.program_cost import ANALYSES_PER_CALL, ProgramCost, ProgramSteps, peak_flops_for, phase_rates
from xla_keras.core.signatures import fingerprint
from xla_keras.core.tags import TAG_FLOPS_PER_SECOND, TAG_MFU
from xla_keras.core.types import CallPlan, Notes, Scalar
from xla_keras.session.phases import PhaseStats

CAPPED = (
    "cost card: {cap} {phase} programs analysed in this call (the cap); of the {phase} programs compiled after "
    "them, only up to {cap} that ran again get figures (the others' report.compilations[i].cost is None)"
)
# Programs past the cap whose batch shapes are kept, in case they run again (bounded: shapes only).
KEPT_PAST_CAP = 64


# ``cost="auto"``: the analyses together take at most this share of the monitored time (TensorFlow lowers the
# step again for each program: 0.05-0.3 s each, measured; a storm's dozens of programs would cost seconds).
COST_SHARE = 0.05
BUDGET = (
    "cost card: programs left without figures: analysing them (~{each:.2f} s each) would pass {share:.0%} of the "
    "monitored time; XlaMonitor(cost='full') analyses every program"
)


class CostMeter:
    """One model's program costs (``XlaMonitor(cost=...)``)."""

    def __init__(self, mode: str, peak_flops: Optional[float], backend: Backend, notes: Notes):
        self.mode = mode
        self.backend = backend
        self.notes = notes
        self._peak_flops = peak_flops  # the user's, per device; else the table's, once the device is known
        self._peak: Optional[Tuple[float, str]] = None
        # A program is a (phase, signature fingerprint, id of the step function's token in the ledger): a
        # rebuilt function (model.compile(), a jit switch) compiles the same shapes into another program.
        self._pending: Dict[Tuple[str, int, int], Any] = {}  # program -> the batch's shapes
        self._costs: Dict[Tuple[str, int, int], ProgramCost] = {}  # program -> its cost
        self._latest: Dict[Tuple[str, int], ProgramCost] = {}  # (phase, fingerprint) -> its last program's cost
        self._spent: Dict[str, int] = {}  # phase -> analyses (done or pending) in this call
        self._past_cap: Dict[Tuple[str, int, int], Any] = {}  # program past the cap -> the batch's shapes
        self._again: Dict[str, int] = {}  # phase -> programs past the cap analysed in this call (they ran again)
        self._attached: Dict[str, int] = {}  # phase -> the first record still waiting for its figures
        self.analysis_seconds = 0.0  # the analyses' time so far (the budget: COST_SHARE of the monitored time)
        self._analyses = 0

    def call_began(self) -> None:
        """A fit (or a standalone evaluate / predict) began: its own budget of analyses per phase."""
        self._spent, self._again = {}, {}
        for phase, _, _ in self._pending:
            self._spent[phase] = self._spent.get(phase, 0) + 1

    def capture(self, phase: str, plan: CallPlan, batches: list, function: object) -> None:
        """A call with new signatures began (``function``: the ledger's token of the step function that
        runs them): keep their batches' shapes for an analysis later."""
        if self.mode == "off":
            return
        for index, _, signature in plan.new:
            key = (phase, fingerprint(signature), id(function))
            if key in self._costs or key in self._pending or key in self._past_cap:
                continue
            if self._spent.get(phase, 0) >= ANALYSES_PER_CALL:
                self.notes.add_once(f"cost-capped-{phase}", CAPPED.format(cap=ANALYSES_PER_CALL, phase=phase))
                if len(self._past_cap) < KEPT_PAST_CAP:  # analysed only if it runs again
                    try:
                        self._past_cap[key] = self.backend.cost_spec(batches[index])
                    except Exception:  # noqa: BLE001 - a batch the backend cannot describe: no figures
                        pass
                continue
            self._spent[phase] = self._spent.get(phase, 0) + 1
            try:
                self._pending[key] = self.backend.cost_spec(batches[index])
            except Exception as error:  # noqa: BLE001 - a batch the backend cannot describe: no figures
                cost = ProgramCost(source=self.backend.cost_source, unavailable=_failed(error))
                self._costs[key] = self._latest[key[:2]] = cost

    def analyse(
        self,
        model: Any,
        phases: Dict[str, PhaseStats],
        budget: Optional[float] = None,
        monitored_seconds: Optional[float] = None,
    ) -> None:
        """Off the step path (an epoch end, a call's end): analyse the kept programs, the most-run first, and
        give each ledger record of their signatures the figures. ``budget``: the seconds this may take (an
        epoch end: a small share of the epoch); ``monitored_seconds``: the time monitored so far, of which all
        the analyses together take at most ``COST_SHARE`` (``cost="auto"``). An analysis runs when the time
        the ones before took says it fits (a short fit on TensorFlow, whose analysis lowers the step again,
        may get none: a note says so); the programs left wait for the next time."""
        if not self._pending and not self._costs:
            return
        began = time.perf_counter()
        try:
            self.peak(model)
        except Exception as error:  # noqa: BLE001 - no peak: no MFU, the rest of the card goes on
            self.notes.add_once("cost-peak", f"cost card: no MFU, the device's peak is unknown ({_failed(error)})")
        left = budget
        if monitored_seconds is not None and self.mode != "full":
            share = COST_SHARE * monitored_seconds - self.analysis_seconds
            left = share if left is None else min(left, share)
        runs = {phase: stats.history.batches for phase, stats in phases.items()}
        for key, spec in sorted(self._pending.items(), key=lambda item: -runs.get(item[0][0], {}).get(item[0][1], 0)):
            estimate = self._estimate(phases[key[0]])
            if left is not None and time.perf_counter() - began + estimate > left:
                if budget is None:  # a call's end: what is left now stays without figures
                    self.notes.add_once("cost-budget", BUDGET.format(share=COST_SHARE, each=estimate))
                break
            del self._pending[key]
            started = time.perf_counter()
            try:
                cost = self.backend.program_cost(model, key[0], spec, self.mode, self.notes)
            except Exception as error:  # noqa: BLE001 - never from here: the figures are unavailable
                cost = ProgramCost(source=self.backend.cost_source, unavailable=_failed(error))
            self._took(time.perf_counter() - started)
            self._costs[key] = self._latest[key[:2]] = cost
        spent = time.perf_counter() - began
        for phase, stats in phases.items():
            # A record waits for its figures while its program waits for its analysis (the budget).
            start = self._attached.get(phase, 0)
            records = stats.records
            for record in records[start:]:
                if record.cost is None:
                    record.cost = self._latest.get((phase, fingerprint(record.signature)))
            waiting = next((i for i in range(start, len(records)) if records[i].cost is None), len(records))
            self._attached[phase] = waiting  # the first record still without figures
        self._analyse_ran_again(model, phases, None if left is None else left - spent, budget is None)

    def _analyse_ran_again(
        self, model: Any, phases: Dict[str, PhaseStats], left: Optional[float], final: bool = True
    ) -> None:
        """The programs past the cap that ran again (most steps first), up to ``ANALYSES_PER_CALL`` per phase
        and call, within the seconds ``left`` of the budget: the steady steps ran them. Their records, passed
        over before, get the figures."""
        began = time.perf_counter()
        for phase, stats in phases.items():
            batches = stats.history.batches
            again = [key for key in self._past_cap if key[0] == phase and batches.get(key[1], 0) >= 2]
            again.sort(key=lambda key: -batches[key[1]])
            allowed = ANALYSES_PER_CALL - self._again.get(phase, 0)
            analysed: Dict[int, ProgramCost] = {}
            for key in again[: max(0, allowed)]:
                if left is not None and time.perf_counter() - began + self._estimate(stats) > left:
                    if final:
                        self.notes.add_once("cost-budget", BUDGET.format(share=COST_SHARE, each=self._estimate(stats)))
                    break
                spec = self._past_cap.pop(key)
                started = time.perf_counter()
                try:
                    cost = self.backend.program_cost(model, phase, spec, self.mode, self.notes)
                except Exception as error:  # noqa: BLE001 - never from here: the figures are unavailable
                    cost = ProgramCost(source=self.backend.cost_source, unavailable=_failed(error))
                self._took(time.perf_counter() - started)
                self._costs[key] = self._latest[key[:2]] = analysed[key[1]] = cost
                self._again[phase] = self._again.get(phase, 0) + 1
            if analysed:
                for record in stats.records:
                    if record.cost is None:
                        record.cost = analysed.get(fingerprint(record.signature))

    def _took(self, seconds: float) -> None:
        self.analysis_seconds += seconds
        self._analyses += 1

    def _estimate(self, stats: PhaseStats) -> float:
        """What the next analysis will take: the mean of those before; the first, its backend's share of the
        phase's mean compile."""
        if self._analyses:
            return self.analysis_seconds / self._analyses
        compiles = stats.compile_count
        return self.backend.cost_share_of_compile * stats.compile_seconds() / compiles if compiles else 0.0

    def peak(self, model: Any) -> Optional[Tuple[float, str]]:
        """One device's peak FLOP/s for the model's compute dtype, and where it comes from; None: unknown."""
        if self._peak is None:
            if self._peak_flops is not None:
                self._peak = (self._peak_flops, "XlaMonitor(peak_flops=...)")
            else:
                kind = self.backend.device_kind()
                dtype = str(getattr(getattr(model, "dtype_policy", None), "compute_dtype", "float32"))
                table = peak_flops_for(kind, dtype) if kind else None
                if table is not None:
                    self._peak = (table, f"the peak table for {kind} ({dtype})")
        return self._peak

    def programs(self, phase: str, stats: PhaseStats) -> List[ProgramSteps]:
        """The programs the phase's steps ran, each with the steps that ran it (its signature's batches):
        a signature never analysed, and the steps whose signature the phase did not keep, have no cost."""
        history = stats.history
        out = [ProgramSteps(self._latest.get((phase, fp)), n) for fp, n in history.batches.items() if n > 0]
        if history.untracked:
            out.append(ProgramSteps(None, history.untracked))
        return out

    def rates(self, phases: Dict[str, PhaseStats]) -> Dict[str, Dict[str, Any]]:
        """Per phase whose steps ran an analysed program: its achieved rates (``core.program_cost.phase_rates``):
        each program's FLOPs times the steps that ran it, over the time of those steps."""
        out = {}
        for phase, stats in phases.items():
            programs = self.programs(phase, stats)
            if any(p.cost is not None and p.cost.flops is not None for p in programs):
                timing = stats.timing
                out[phase] = phase_rates(
                    programs,
                    timing.median_seconds,
                    timing.median_samples,
                    self._peak,
                    self._withheld(stats),
                    timing.median_intervals,
                    timing.steady_total / timing.steady_count if timing.steady_count else None,
                )
        return out

    def _withheld(self, stats: PhaseStats) -> Optional[str]:
        """Why the phase has no steady step to carry a rate (JAX: no interval between drains yet), or None."""
        return stats.steady_withheld(self.backend.ends_calls_in_wrapper)

    def scalars(self, phase: str, stats: PhaseStats) -> List[Scalar]:
        """``xla/flops_per_second`` and ``xla/mfu`` for the phase at its steady step time, when known."""
        rates = self.rates({phase: stats}).get(phase)
        if rates is None:
            return []
        out = []
        if rates["flops_per_second"] is not None:
            out.append(Scalar(phase, TAG_FLOPS_PER_SECOND, rates["flops_per_second"], stats.step))
        if rates["mfu"] is not None:
            out.append(Scalar(phase, TAG_MFU, rates["mfu"], stats.step))
        return out


def _failed(error: BaseException) -> str:
    return f"the analysis failed: {type(error).__name__}: {error}"[:200]
