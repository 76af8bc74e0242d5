"""Which step function runs each phase, and whether a user replaced one behind the monitor. Pure."""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Sequence

if TYPE_CHECKING:
    from xla_keras.core.ledger import CompileLedger
    from xla_keras.core.phases import PhaseStats


class FunctionWatch:
    """A function replaced since its phase last ran, and not by the monitor (e.g. model.compile),
    starts an empty XLA cache: known shapes compile again. Counted per phase (``PhaseStats.rebuilds``)
    so that the report can say why."""

    def __init__(self, ledger: CompileLedger, phases: Dict[str, PhaseStats]):
        self.ledger = ledger
        self.phases = phases
        self._models: Dict[str, int] = {}  # id of the model each phase's function belongs to
        self._forced: set = set()  # phases whose function the monitor itself dropped or rebuilt

    def forced(self, phases: Sequence[str]) -> None:
        """The monitor itself dropped or rebuilt these phases' functions (not a user's rebuild)."""
        self._forced.update(phases)

    def installed(
        self,
        phase: str,
        before: object,
        token: object,
        model_id: int,
        rebuilt: bool,
        xla_now: bool,
        keep_previous: bool = False,
    ) -> None:
        """The step function ``token`` now runs ``phase`` (``before``: the one found there)."""
        replaced = (
            self._models.get(phase) == model_id
            and phase not in self._forced
            and self.ledger.function(phase) is not before
        )
        self._forced.discard(phase)
        self._models[phase] = model_id
        if self.ledger.set_function(phase, token, keep_previous) and replaced and not rebuilt and xla_now:
            self.phases[phase].rebuilds += 1
