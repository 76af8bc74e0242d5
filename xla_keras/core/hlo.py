"""FLOPs of an XLA HLO module's dots and convolutions, counted from its text. Pure.

TensorFlow hands Python the HLO of a jit-compiled function (``experimental_get_compiler_ir``) but no
cost analysis: the cost card counts the matrix products and convolutions there as XLA's own cost
analysis counts them, two FLOPs per multiply-add, a convolution's window only where it overlaps its
input (padding is no work). The text is the module before XLA's optimisations, so what its result
never reaches (TensorFlow's gradient of the data, which XLA then removes) is left out here too.
Elementwise operations are not counted: in the models XLA is used for, products dominate.
"""

from __future__ import annotations

import math
import re
from typing import Dict, List, Optional, Set

_SHAPE = r"[a-z0-9]+\[([0-9,]*)\](?:\{[^}]*\})?"
_OPERAND = _SHAPE + r"\s+%[\w.\-]+"
_PRODUCT = re.compile(
    r"=\s*" + _SHAPE + r"\s+(dot|convolution)\(\s*" + _OPERAND + r"\s*,\s*" + _OPERAND + r"\s*\)(.*)$"
)
_DEFINED = re.compile(r"^\s*(ROOT\s+)?%([\w.\-]+)\s*=")
_COMPUTATION = re.compile(r"^(ENTRY\s+)?%([\w.\-]+)\s*\(.*\{\s*$")
_NAME = re.compile(r"%([\w.\-]+)")
_LHS_CONTRACTING = re.compile(r"lhs_contracting_dims=\{([0-9,]*)\}")
_DIM_LABELS = re.compile(r"dim_labels=(\w+)_(\w+)->(\w+)")
_WINDOW = re.compile(r"window=\{([^}]*)\}")
_GROUPS = re.compile(r"feature_group_count=(\d+)")


def _dims(text: str) -> List[int]:
    return [int(d) for d in text.split(",") if d]


def _window(text: str, rank: int) -> Dict[str, List[List[int]]]:
    """``window={size=3x3 pad=2_2x2_2 stride=2x2 lhs_dilate=.. rhs_dilate=..}`` per spatial dim."""
    fields = dict(item.split("=", 1) for item in text.split() if "=" in item)
    ones = [[1]] * rank
    return {
        "pad": [list(map(int, p.split("_"))) for p in fields["pad"].split("x")] if "pad" in fields else [[0, 0]] * rank,
        "stride": [[int(v)] for v in fields["stride"].split("x")] if "stride" in fields else ones,
        "lhs": [[int(v)] for v in fields["lhs_dilate"].split("x")] if "lhs_dilate" in fields else ones,
        "rhs": [[int(v)] for v in fields["rhs_dilate"].split("x")] if "rhs_dilate" in fields else ones,
    }


def _valid_pairs(size_in: int, kernel: int, size_out: int, pad_low: int, stride: int, lhs: int, rhs: int) -> int:
    """(output position, kernel position) pairs of one spatial dim whose input position is real data."""
    count = 0
    for o in range(size_out):
        for k in range(kernel):
            position = o * stride + k * rhs - pad_low  # in the (lhs-dilated) input
            if position >= 0 and position % lhs == 0 and position // lhs < size_in:
                count += 1
    return count


def _convolution_macs(out: List[int], lhs: List[int], rhs: List[int], rest: str) -> Optional[int]:
    labels, window = _DIM_LABELS.search(rest), _WINDOW.search(rest)
    if labels is None or window is None:
        return None
    lhs_labels, rhs_labels, out_labels = labels[1], labels[2], labels[3]
    if not (len(lhs_labels) == len(lhs) and len(rhs_labels) == len(rhs) and len(out_labels) == len(out)):
        return None
    rank = sum(c.isdigit() for c in lhs_labels)
    w = _window(window[1], rank)
    pairs = 1
    for i in range(rank):  # the window lists spatial dims in their number's order (0, 1, ...)
        dim = str(i)
        pairs *= _valid_pairs(
            lhs[lhs_labels.index(dim)],
            rhs[rhs_labels.index(dim)],
            out[out_labels.index(dim)],
            w["pad"][i][0],
            w["stride"][i][0],
            w["lhs"][i][0],
            w["rhs"][i][0],
        )
    groups = _GROUPS.search(rest)
    features_in = lhs[lhs_labels.index("f")] // (int(groups[1]) if groups else 1)
    return out[out_labels.index("b")] * out[out_labels.index("f")] * features_in * pairs


def _live(lines: List[str]) -> Set[str]:
    """Names of the instructions the entry computation's result depends on (through called computations)."""
    definitions: Dict[str, str] = {}
    roots: Dict[str, str] = {}  # computation -> its ROOT instruction
    entry, current = None, None
    for line in lines:
        header = _COMPUTATION.match(line)
        if header is not None:
            current = header[2]
            if header[1]:
                entry = current
            continue
        defined = _DEFINED.match(line)
        if defined is not None:
            definitions[defined[2]] = line
            if defined[1] and current is not None:
                roots[current] = defined[2]
    if entry is None or entry not in roots:
        return set(definitions)  # not a whole module: everything counts
    live: Set[str] = set()
    stack = [roots[entry]]
    while stack:
        name = stack.pop()
        if name in live:
            continue
        live.add(name)
        right = definitions[name].split("=", 1)[1].split(", metadata=")[0]
        for used in _NAME.findall(right):
            if used in definitions:
                stack.append(used)
            elif used in roots:
                stack.append(roots[used])  # a called computation: what its result depends on
    return live


def dot_conv_flops(hlo_text: str) -> Optional[float]:
    """Two FLOPs per multiply-add of every live ``dot`` and ``convolution`` in the module; None when the
    text holds none that can be read (operand shapes are needed inline, as unoptimised HLO prints them).

    Args:
        hlo_text: an HLO module as text.

    Returns:
        FLOPs, or None.
    """
    lines = hlo_text.splitlines()
    live = _live(lines)
    total, found = 0.0, False
    for line in lines:
        defined, match = _DEFINED.match(line), _PRODUCT.search(line)
        if match is None or defined is None or defined[2] not in live:
            continue
        out, kind, lhs, rhs, rest = _dims(match[1]), match[2], _dims(match[3]), _dims(match[4]), match[5]
        if kind == "dot":
            contracting = _LHS_CONTRACTING.search(rest)
            if contracting is None:
                continue
            macs: Optional[int] = math.prod(out) * math.prod(lhs[d] for d in _dims(contracting[1]))
        else:
            macs = _convolution_macs(out, lhs, rhs, rest)
        if macs is not None:
            total += 2.0 * macs
            found = True
    return total if found else None
