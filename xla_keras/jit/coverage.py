"""What auto-clustering put inside XLA and what it left out: in the monitor's trace window (the op kernels
that ran under ``_XlaRun`` against the rest, by op type, count and time), and per graph from TensorFlow's
own clustering summary; and why an op type stays outside. Pure.

The trace window (``profile="auto"``: 5 steady train steps) is what the monitor reads in the user's
process: no log flag is set behind their back.

TensorFlow prints the summary when its log asks for it (``TF_CPP_VMODULE=mark_for_compilation_pass=3``,
with ``TF_CPP_MIN_LOG_LEVEL=0``): per graph it clusters, the clusters built and their op types, then the
nodes left unclustered by op type, and each edge it could not contract, and why (measured on TensorFlow
2.16 to 2.21: level 2 prints only the graph's size, the clusters' and the unclustered totals). The
monitor never sets those flags in the user's process: ``xla-keras explain`` reads a log the user made
(``xla-keras doctor`` says how), and the tests read it from a subprocess.

    *** Clustering info for graph of size 217
     Built 3 clusters, size 182 / 217 (83.87%)
      cluster_0 69 / 217 (31.80%)
       AddV2: 1 instances
     Unclustered nodes: 35 / 217 (16.13%)
      LookupTableFindV2: 1 instances
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Tuple

from xla_keras.jit.unsupported import layer_named

# TensorFlow's bookkeeping nodes: the graph's arguments and results, control and constants. They are in
# "Unclustered nodes" but no computation is left out with them.
BOOKKEEPING = ("_Arg", "_Retval", "NoOp", "Const")

# The fixes that are code, as the user runs it (the others are words: "apply the layer in dataset.map").
_REMAPPING_OFF = 'tf.config.optimizer.set_experimental_options({"remapping": False})'
# Why an op type stays outside XLA's clusters, where it is known; "unknown" is said as such.
_GRAPPLER_FUSED = (
    "fused by grappler first (its remapper runs before clustering); XLA has no kernel for the fused op on "
    "CPU, so the layer's forward pass runs outside XLA. Fix: "
    f"{_REMAPPING_OFF} before the model is built"
)
FIX_CODE = {_GRAPPLER_FUSED: _REMAPPING_OFF}
_LOOKUP = "a lookup table (a resource keyed by strings): no XLA kernel. Fix: apply the layer in dataset.map"
_STRINGS = "a string op: XLA takes no string tensors. Fix: apply it in dataset.map"
_VARIABLES = "a variable read or write at a cluster's edge (resource variable semantics keep it out)"
REASONS: Dict[str, str] = {
    "_FusedMatMul": _GRAPPLER_FUSED,
    "_FusedConv2D": _GRAPPLER_FUSED,
    "_FusedBatchNormEx": _GRAPPLER_FUSED,
    "LookupTableFindV2": _LOOKUP,
    "LookupTableImportV2": _LOOKUP,
    "LookupTableSizeV2": _LOOKUP,
    "HashTableV2": _LOOKUP,
    "MutableHashTableV2": _LOOKUP,
    "ReadVariableOp": _VARIABLES,
    "AssignVariableOp": _VARIABLES,
    "AssignAddVariableOp": _VARIABLES,
    "AssignSubVariableOp": _VARIABLES,
    "_Arg": "the graph's argument (bookkeeping)",
    "_Retval": "the graph's result (bookkeeping)",
    "NoOp": "control only (bookkeeping)",
    "Const": "a constant (bookkeeping)",
    "PrintV2": "prints on the host: no XLA kernel",
    "Where": "its output's shape depends on the data (XLA compiles static shapes)",
    "Unique": "its output's shape depends on the data (XLA compiles static shapes)",
    "IteratorGetNext": "reads the input pipeline: no XLA kernel",
}
_STRING_OP = re.compile(r"^(String|Strings|AsString|Regex|Unicode|Substr|DecodeBase64|EncodeBase64|ReduceJoin)")
_SPARSE_OP = re.compile(r"^Sparse")


def op_type(kernel: str) -> str:
    """The graph's op type of a kernel the trace names: oneDNN's rewrites after clustering
    (``_MklNativeFusedMatMul``, ``_MklMatMul``) under the name TensorFlow's clustering summary uses."""
    for prefix in ("_MklNative", "_Mkl"):
        if kernel.startswith(prefix):
            rest = kernel[len(prefix) :]
            return f"_{rest}" if rest.startswith("Fused") else rest
    return kernel


def reason(op_type: str) -> str:
    """Why ``op_type`` stays outside XLA's clusters, or "unknown"."""
    if op_type in REASONS:
        return REASONS[op_type]
    if _STRING_OP.match(op_type):
        return _STRINGS
    if _SPARSE_OP.match(op_type):
        return "a sparse op: no XLA kernel on this device"
    return "unknown"


@dataclass
class Cluster:
    name: str
    size: int
    ops: Dict[str, int] = field(default_factory=dict)


@dataclass
class GraphCoverage:
    """One graph TensorFlow clustered: its size, its clusters, the nodes left out by op type, and the edges
    it could not contract (level 3: the reason words, counted)."""

    size: int
    built: int = 0
    clustered: int = 0
    clusters: List[Cluster] = field(default_factory=list)
    unclustered: int = 0
    outside: Dict[str, int] = field(default_factory=dict)
    not_contracted: Dict[str, int] = field(default_factory=dict)

    @property
    def computation_outside(self) -> Optional[int]:
        """The unclustered nodes that compute: bookkeeping (``BOOKKEEPING``) left out; None when the log
        has no op types for them (level 2 prints the totals only)."""
        if self.unclustered and not self.outside:
            return None
        return sum(n for op, n in self.outside.items() if op not in BOOKKEEPING)

    @property
    def share_inside(self) -> Optional[float]:
        return self.clustered / self.size if self.size else None


_PREFIX = re.compile(r"^.*?mark_for_compilation_pass\.cc:\d+\]\s?")
_INFO = re.compile(r"\*\*\* Clustering info for graph of size (\d+)")
_BUILT = re.compile(r"^\s*Built (\d+) clusters, size (\d+) / (\d+)")
_CLUSTER = re.compile(r"^\s*(\S+) (\d+) / (\d+) \([0-9.]+%\)$")
_UNCLUSTERED = re.compile(r"^\s*Unclustered nodes: (\d+) / (\d+)")
_INSTANCES = re.compile(r"^\s*(\S+): (\d+) instances$")
_NOT_CONTRACTED = re.compile(r"Could not contract .* because (.+?)\.?$")
_VIA = re.compile(r" via \[.*\]$")


def clustering_summaries(lines: Iterable[str]) -> List[GraphCoverage]:
    """Every graph's clustering summary in a log, in order. The edges TensorFlow could not contract
    (level 3) count toward the graph whose summary follows them."""
    graphs: List[GraphCoverage] = []
    current: Optional[GraphCoverage] = None
    section: Optional[Dict[str, int]] = None  # where the next "Op: N instances" line goes
    pending: Dict[str, int] = {}
    for raw in lines:
        if "mark_for_compilation_pass" not in raw:
            continue
        line = _PREFIX.sub("", raw.rstrip("\n"))
        info = _INFO.search(line)
        if info:
            current = GraphCoverage(int(info.group(1)), not_contracted=pending)
            graphs.append(current)
            section, pending = None, {}
            continue
        blocked = _NOT_CONTRACTED.search(line)
        if blocked:
            why = _VIA.sub("", blocked.group(1))  # "... would create a cycle via [nodes]": counted as one reason
            pending[why] = pending.get(why, 0) + 1
            continue
        if current is None:
            continue
        built, unclustered, cluster, instances = (
            _BUILT.match(line),
            _UNCLUSTERED.match(line),
            _CLUSTER.match(line),
            _INSTANCES.match(line),
        )
        if built:
            current.built, current.clustered = int(built.group(1)), int(built.group(2))
            section = None
        elif unclustered:
            current.unclustered = int(unclustered.group(1))
            section = current.outside
        elif instances and section is not None:
            section[instances.group(1)] = int(instances.group(2))
        elif cluster:
            current.clusters.append(Cluster(cluster.group(1), int(cluster.group(2))))
            section = current.clusters[-1].ops
        else:
            section = None
    return graphs


def coverage_lines(graph: GraphCoverage, width: int = 100) -> List[str]:
    """One graph's coverage in words: its clusters, what stayed outside and why (at most ``width`` columns
    a line, the op types' reasons each on their own line)."""
    share = f"{graph.share_inside:.1%}" if graph.share_inside is not None else "n/a"
    computing = graph.computation_outside
    which = (
        f"{computing} of them computing (bookkeeping {', '.join(BOOKKEEPING)} left out)"
        if computing is not None
        else "their op types are not in this log (TF_CPP_VMODULE=mark_for_compilation_pass=3 lists them)"
    )
    lines = [
        f"graph of {graph.size} nodes: {graph.built} cluster(s) hold {graph.clustered} ({share}); "
        f"{graph.unclustered} outside XLA, {which}"
    ]
    if graph.clusters:
        lines.append("  clusters: " + ", ".join(f"{c.name} {c.size} nodes" for c in graph.clusters))
    by_count = sorted(
        ((op, n) for op, n in graph.outside.items() if op not in BOOKKEEPING), key=lambda item: (-item[1], item[0])
    )
    for op, n in by_count:
        lines.append(f"  outside: {op} x{n}: {reason(op)}")
    if graph.not_contracted:
        said = "; ".join(f"{n} because {why}" for why, n in sorted(graph.not_contracted.items(), key=lambda i: -i[1]))
        lines.append(f"  edges not contracted: {said}")
    out: List[str] = []
    for line in lines:
        out.extend(_wrapped(line, width))
    return out


def _wrapped(line: str, width: int) -> List[str]:
    if len(line) <= width:
        return [line]
    return textwrap.wrap(line, width, subsequent_indent="      ", break_long_words=False, break_on_hyphens=False)


# In a trace, an op kernel's event is "node_name:OpType".
_OP_EVENT = re.compile(r"^([^:\s]+):([A-Za-z_]\w*)$")
XLA_RUN = "_XlaRun"  # a cluster's run: its time is XLA's
XLA_LAUNCH = ("_XlaCompile", "_XlaMerge")  # XLA's launch (a cache lookup, a merge): on neither side
COUNTED = (
    "the op kernels the trace window saw run, each node once: TensorFlow's bookkeeping nodes (_Arg, _Retval, "
    "NoOp, Const) run no kernel there and are not counted; _XlaCompile and _XlaMerge (XLA's launch) count on "
    "neither side"
)

OTHER_PHASES = "test and predict: withheld, their steps are not traced (the trace window holds train steps)"


ON_AN_ACCELERATOR = (
    "withheld on a GPU or TPU: the host's events of op kernels and of _XlaRun are launch times there, not the "
    "time the ops take on the device"
)


def trace_coverage(
    events: Iterable[Tuple[str, int]], layer_names: Iterable[str], steps: int, op_time: bool = True
) -> Optional[Dict[str, Any]]:
    """Coverage of the step by XLA's clusters, from a trace window's events (``(name, duration_ps)``):
    the op time under ``_XlaRun`` against the other op kernels', and each op type outside (its nodes, their
    layers, their time per step and share, the reason), over the window's ``steps`` train steps. None when
    the window saw no op kernel. ``op_time`` False (an accelerator): the counts stand, the times are
    withheld (``ON_AN_ACCELERATOR``)."""
    names = list(layer_names)
    runs: Dict[str, int] = {}
    inside_ps, clusters = 0, set()
    outside: Dict[str, Dict[str, Any]] = {}
    for name, duration_ps in events:
        match = _OP_EVENT.match(name)
        if not match:
            continue
        node, kernel = match.groups()
        runs[node] = runs.get(node, 0) + 1
        if kernel == XLA_RUN:
            inside_ps += duration_ps
            clusters.add(node)
        elif kernel not in XLA_LAUNCH:
            entry = outside.setdefault(op_type(kernel), {"nodes": set(), "ps": 0, "layers": set()})
            entry["nodes"].add(node)
            entry["ps"] += duration_ps
            layer = layer_named(node.split("/")[:-1], names)
            if layer:
                entry["layers"].add(layer)
    if not runs:
        return None
    total_ps = inside_ps + sum(entry["ps"] for entry in outside.values())
    ops = [
        {
            "op": op,
            "nodes": len(entry["nodes"]),
            "layers": sorted(entry["layers"]),
            "seconds_per_step": entry["ps"] / steps / 1e12,
            "share": entry["ps"] / total_ps if total_ps else None,
            "reason": reason(op),
        }
        for op, entry in sorted(outside.items(), key=lambda item: (-item[1]["ps"], item[0]))
    ]
    fixable = next((op for op in ops if "Fix: " in op["reason"]), None)
    coverage: Dict[str, Any] = {
        "phase": "train",
        "steps": steps,
        "clusters": len(clusters),
        "share_inside": inside_ps / total_ps if total_ps else None,
        "inside_seconds_per_step": inside_ps / steps / 1e12,
        "outside_seconds_per_step": (total_ps - inside_ps) / steps / 1e12,
        "nodes_outside": sum(op["nodes"] for op in ops),
        "ops_outside": ops,
        "advice": {
            "op": fixable["op"],
            "fix": fixable["reason"].split("Fix: ", 1)[1],
            "code": FIX_CODE.get(fixable["reason"]),  # None: the fix is words
        }
        if fixable
        else None,
        "counted": COUNTED,
        "other_phases": OTHER_PHASES,
    }
    if not op_time:
        coverage.update(share_inside=None, inside_seconds_per_step=None, outside_seconds_per_step=None)
        coverage["withheld"] = ON_AN_ACCELERATOR
        for op in ops:
            op.update(seconds_per_step=None, share=None)
    return coverage


def coverage_words(coverage: Dict[str, Any]) -> str:
    """The trace window's coverage in one phrase: ``87% of op time in XLA (3 clusters, 5 steps)``."""
    share = coverage.get("share_inside")
    if share is not None:
        said = f"{share:.0%} of op time in XLA"
    else:  # an accelerator's launch times are no op time: withheld, with the reason in report.coverage
        said = "op time withheld (host launch times)" if coverage.get("withheld") else "no op time measured"
    return f"{said} ({coverage.get('clusters')} cluster(s), {coverage.get('steps')} steps traced)"


def outside_words(op: Dict[str, Any], short: bool = False) -> str:
    """One op type outside XLA: ``_FusedMatMul x2 in hidden, head (9% of op time)``; ``short``:
    ``_FusedMatMul in hidden, head (9%)``."""
    layers = f" in {', '.join(op['layers'])}" if op.get("layers") else ""
    share = "" if op.get("share") is None else f" ({op['share']:.0%})" if short else f" ({op['share']:.0%} of op time)"
    return f"{op['op']}{'' if short else ' x' + str(op['nodes'])}{layers}{share}"
