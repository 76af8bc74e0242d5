"""Bucket boundaries: the few lengths to pad to, chosen by an exact optimiser.

Pure. Given how often each length occurs (``{length: weight}``), ``best_buckets``
finds the ``k`` boundaries that minimise padding by dynamic programming over
candidate boundaries; ``choose_buckets`` grows ``k`` per varying axis while
padding stays above the target and the joint compiles below the storm
threshold. Storm advice uses it twice: on the lengths of the batches as fed
(pad each batch) and on the real lengths of the rows (bucket rows by length).
"""

from __future__ import annotations

import math
from typing import Dict, List, Sequence, Tuple

# Bucket boundaries are rounded up to a multiple of this (friendlier kernels,
# fewer distinct candidates); lengths at or below EXACT_UP_TO are kept exact.
BOUNDARY_MULTIPLE = 8
# The smallest number of buckets whose padding overhead is at most this wins.
TARGET_PADDING_OVERHEAD = 0.20


# Lengths up to this stay exact candidates (rounding short sequences to 8
# would cost a lot of padding: 9..18 as [16, 24] is 45%).
EXACT_UP_TO = 32
MAX_CANDIDATES = 128


def _round_up(value: int, multiple: int, exact_up_to: int = EXACT_UP_TO) -> int:
    if value <= exact_up_to:
        return value
    return int(math.ceil(value / multiple) * multiple)


def _candidates(lengths: Dict[int, int], multiple: int) -> Dict[int, List[int]]:
    """Candidate boundaries -> the observed lengths they cover. Short lengths
    stay exact, longer ones are rounded up to ``multiple``; past
    MAX_CANDIDATES every length is put on a coarser grid, doubling until it
    fits (the grid always coarsens, so this ends)."""
    exact_up_to = EXACT_UP_TO
    while True:
        rounded: Dict[int, List[int]] = {}
        for v in sorted(lengths):
            rounded.setdefault(_round_up(v, multiple, exact_up_to), []).append(v)
        if len(rounded) <= MAX_CANDIDATES:
            return rounded
        exact_up_to = 0
        multiple *= 2


def best_buckets(
    lengths: Dict[int, int], k: int, multiple: int = BOUNDARY_MULTIPLE, power: int = 1
) -> Tuple[List[int], float]:
    """At most ``k`` lengths to pad to, minimising padding over the observed
    lengths (``{length: batches}``). Returns (sorted boundaries, overhead) with
    overhead = padded / real - 1. Exact dynamic programme over the candidate
    boundaries (short lengths exact, longer ones rounded up to ``multiple``).
    ``power``: how many axes of a leaf take the length together (an image's
    height and width: 2), so that the padding minimised is the elements'
    (length ** power), not one axis's."""
    real = sum(v**power * w for v, w in lengths.items())
    if not lengths or real <= 0:
        return [], 0.0
    rounded = _candidates(lengths, multiple)
    cands = sorted(rounded)
    n = len(cands)
    k = max(1, min(k, n))
    # Weight and token sums per candidate, prefix sums for O(1) group costs.
    w = [sum(lengths[v] for v in rounded[c]) for c in cands]
    s = [sum(v**power * lengths[v] for v in rounded[c]) for c in cands]
    pw, ps = [0], [0]
    for a, b in zip(w, s):
        pw.append(pw[-1] + a)
        ps.append(ps[-1] + b)

    def cost(i: int, j: int) -> int:  # candidates i..j padded to cands[j]
        return cands[j] ** power * (pw[j + 1] - pw[i]) - (ps[j + 1] - ps[i])

    inf = float("inf")
    best = [[inf] * n for _ in range(k + 1)]
    back = [[-1] * n for _ in range(k + 1)]
    for j in range(n):
        best[1][j] = cost(0, j)
    for b in range(2, k + 1):
        for j in range(n):
            for i in range(b - 2, j):
                c = best[b - 1][i] + cost(i + 1, j)
                if c < best[b][j]:
                    best[b][j], back[b][j] = c, i
    b = min(range(1, k + 1), key=lambda x: (best[x][n - 1], x))
    boundaries, j = [], n - 1
    while b >= 1 and j >= 0:
        boundaries.append(cands[j])
        j = back[b][j]
        b -= 1
    boundaries.sort()
    return boundaries, best_cost_overhead(lengths, boundaries, power)


def best_cost_overhead(lengths: Dict[int, int], boundaries: Sequence[int], power: int = 1) -> float:
    real = sum(v**power * w for v, w in lengths.items())
    padded = sum(pad_to_boundary(v, boundaries) ** power * w for v, w in lengths.items())
    return padded / real - 1 if real else 0.0


def pad_to_boundary(v: int, boundaries: Sequence[int]) -> int:
    """The first boundary that fits ``v``, else ``v`` itself (a length no boundary covers)."""
    for b in boundaries:
        if v <= b:
            return b
    return v  # longer than every boundary: unseen length, left as is


def pad_target(v: int, boundaries: Sequence[int]) -> int:
    """What ``xla_keras.data`` pads a length to: the first boundary that fits, else the last
    one doubled as often as needed (a few more compiles for longer data, never one per length)."""
    for b in boundaries:
        if v <= b:
            return b
    if not boundaries:
        return v
    last = boundaries[-1]
    return max(v, last * 2 ** math.ceil(math.log2(v / last)))
