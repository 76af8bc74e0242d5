"""What a fit still holds, for ``jit="fastest"``: its steps left and the XLA compiles its shapes predict. Pure.

The shapes seen so far are a sample of the fit's input signatures: the ones
seen but not compiled by the XLA function will compile when they come back,
and the ones never seen are extrapolated from how many were seen once or
twice (Chao's estimator). The monitor's storm rule names what too many is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Sequence


def expected_new(counts: Sequence[int], steps: int) -> float:
    """Distinct signatures never seen so far that ``steps`` more batches are expected to show.

    Chao1's estimate of the unseen (f1^2 / 2 f2, or f1 (f1 - 1) / 2 with no
    doubletons) extrapolated to ``steps`` more draws (Chao et al. 2014,
    Ecological Monographs 84: 45-67, eq. 9): the signatures seen once carry the
    evidence that more exist. Zero when every signature was seen at least twice."""
    n = sum(counts)
    f1 = sum(1 for c in counts if c == 1)
    f2 = sum(1 for c in counts if c == 2)
    if n == 0 or f1 == 0 or steps <= 0:
        return 0.0
    unseen = f1 * f1 / (2 * f2) if f2 else f1 * (f1 - 1) / 2
    if unseen <= 0:
        return 0.0
    return unseen * (1 - (1 - f1 / (n * unseen + f1)) ** steps)


def expected_compiles(counts: Mapping[int, int], compiled: Iterable[int], steps: int) -> float:
    """XLA compiles the next ``steps`` batches are expected to cost a function that compiled
    ``compiled`` (fingerprints): each signature seen but not compiled compiles when it comes back
    (probability 1 - (1 - p)^steps at its observed frequency p), and the unseen ones (``expected_new``)."""
    n = sum(counts.values())
    if n == 0 or steps <= 0:
        return 0.0
    done = set(compiled)
    seen = sum(1 - (1 - c / n) ** steps for fp, c in counts.items() if fp not in done)
    return seen + expected_new(list(counts.values()), steps)


@dataclass(frozen=True)
class Outlook:
    """What the fit still holds, at a check: steps left (None: unknown until the first epoch
    ends), XLA compiles expected for the train steps left and for validation."""

    steps_left: Optional[int]
    xla_compiles_ahead: float = 0.0
    validation_compiles_ahead: float = 0.0
    length_known_later: bool = False  # the steps per epoch will be known when the first epoch ends
    wall_step_seconds: Optional[float] = None  # the fit's wall time per step so far (Keras's loop included)
    xla_compiles_soon: float = 0.0  # XLA train compiles expected over the next storm window (or the steps left)


@dataclass(frozen=True)
class StormRule:
    """The monitor's storm rule: ``threshold`` new shapes compiled within ``window`` steps."""

    threshold: int = 8
    window: int = 200
