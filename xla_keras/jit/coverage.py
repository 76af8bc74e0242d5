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
import statistics
import textwrap
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from xla_keras.jit.unsupported import layer_named

# TensorFlow's bookkeeping nodes: the graph's arguments and results, control and constants. They are in
# "Unclustered nodes" but no computation is left out with them.
BOOKKEEPING = ("_Arg", "_Retval", "NoOp", "Const")

# What a fix does for the op type it is given for ("{op}"): a fix that moves an op into the input pipeline
# takes it out of the step; it does not bring it into XLA (tf.data does not compile it either).
INTO_XLA = "brings {op} into XLA"
OUT_OF_STEP = "takes {op} out of the step, into the input pipeline: not into XLA"
_MOVE = "apply the layer in dataset.map"


@dataclass(frozen=True)
class Why:
    """Why an op type stays outside XLA's clusters, and the fix where one is known: words (``fix``), the
    code the user runs when the fix is code, and what the fix does for the op (``effect``, ``{op}`` in it)."""

    why: str
    fix: Optional[str] = None
    code: Optional[str] = None
    effect: Optional[str] = None

    def words(self, op: str) -> str:
        """The reason with its fix and what the fix does for ``op``."""
        if not self.fix:
            return self.why
        return f"{self.why}. Fix: {self.fix}" + (f" ({self.effect.format(op=op)})" if self.effect else "")


_REMAPPING_OFF = 'tf.config.optimizer.set_experimental_options({"remapping": False})'
_GRAPPLER_FUSED = Why(
    "fused by grappler first (its remapper runs before clustering); XLA has no kernel for the fused op on "
    "CPU, so the layer's forward pass runs outside XLA",
    f"{_REMAPPING_OFF} before the model is built",
    _REMAPPING_OFF,
    INTO_XLA,
)
_STRINGS = Why("a string op: XLA has no string type", _MOVE, effect=OUT_OF_STEP)
_PYTHON = Why(
    "Python code run by tf.py_function or tf.numpy_function: XLA cannot compile Python",
    "write it with TensorFlow ops; or, when it reads only the model's inputs, apply it in dataset.map",
    effect="TensorFlow ops can cluster into XLA; dataset.map takes {op} out of the step, not into XLA",
)
_VARIABLES = Why("a variable read or write at a cluster's edge (resource variable semantics keep it out)")
_DATA_SHAPED = Why("its output's shape depends on the data (XLA compiles static shapes)")
_LOOKUP_OPS = ("LookupTableFindV2", "LookupTableImportV2", "LookupTableSizeV2", "HashTableV2", "MutableHashTableV2")
_STRING_OP = re.compile(
    r"^(String|Strings|AsString|Regex|StaticRegex|Unicode|Substr|DecodeBase64|EncodeBase64|ReduceJoin)"
)
_SPARSE_OP = re.compile(r"^Sparse")
# Why an op type stays outside XLA's clusters, where it is known; "unknown" is said as such. The lookup
# ops' reason names the key dtype the graph shows (``reason``).
REASONS: Dict[str, Why] = {
    "_FusedMatMul": _GRAPPLER_FUSED,
    "_FusedConv2D": _GRAPPLER_FUSED,
    "_FusedBatchNormEx": _GRAPPLER_FUSED,
    "EagerPyFunc": _PYTHON,
    "PyFunc": _PYTHON,
    "PyFuncStateless": _PYTHON,
    "_TensorToHashBucketFast": Why(
        "a Hashing layer on integers: grappler fused its AsString and StringToHashBucketFast into this op, "
        "which hashes the numbers' strings, and XLA has no string type",
        _MOVE,
        effect=OUT_OF_STEP,
    ),
    "ReadVariableOp": _VARIABLES,
    "AssignVariableOp": _VARIABLES,
    "AssignAddVariableOp": _VARIABLES,
    "AssignSubVariableOp": _VARIABLES,
    "_Arg": Why("the graph's argument (bookkeeping)"),
    "_Retval": Why("the graph's result (bookkeeping)"),
    "NoOp": Why("control only (bookkeeping)"),
    "Const": Why("a constant (bookkeeping)"),
    "PrintV2": Why("prints on the host: no XLA kernel"),
    "Where": _DATA_SHAPED,
    "Unique": _DATA_SHAPED,
    "IteratorGetNext": Why("reads the input pipeline: no XLA kernel"),
}


def why_outside(op_type: str, dtypes: Iterable[str] = ()) -> Why:
    """Why ``op_type`` stays outside XLA's clusters (``unknown`` when not known). ``dtypes``: what its
    nodes work on, as the step's graph says (a lookup's keys); none known, none claimed."""
    seen = sorted(set(dtypes))
    if op_type in _LOOKUP_OPS:
        keys = f", {' and '.join(seen)} keys" if seen else ""
        return Why(f"a lookup table (a TensorFlow hash table resource{keys}): no XLA kernel", _MOVE, effect=OUT_OF_STEP)
    if op_type in REASONS:
        return REASONS[op_type]
    if _STRING_OP.match(op_type):
        return _STRINGS
    if _SPARSE_OP.match(op_type):
        return Why("a sparse op: no XLA kernel on this device")
    if seen == ["string"]:
        return Why("it works on strings here, and XLA has no string type", _MOVE, effect=OUT_OF_STEP)
    return Why("unknown")


def reason(op_type: str, dtypes: Iterable[str] = ()) -> str:
    """Why ``op_type`` stays outside XLA's clusters, in words (with its fix), or "unknown"."""
    return why_outside(op_type, dtypes).words(op_type)


def op_type(kernel: str) -> str:
    """The graph's op type of a kernel the trace names: oneDNN's rewrites after clustering
    (``_MklNativeFusedMatMul``, ``_MklMatMul``) under the name TensorFlow's clustering summary uses."""
    for prefix in ("_MklNative", "_Mkl"):
        if kernel.startswith(prefix):
            rest = kernel[len(prefix) :]
            return f"_{rest}" if rest.startswith("Fused") else rest
    return kernel


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
XLA_COMPILE = "_XlaCompile"
XLA_LAUNCH = (XLA_COMPILE, "_XlaMerge")  # XLA's launch (a cache lookup, a merge): on neither side
ADVICE_MIN_SHARE = 0.01  # an op type under 1% of the op time is no advice's target
COUNTED = (
    "the nodes of the step's graph as TensorFlow's executor runs it (kept when the step was built, after "
    "grappler and auto-clustering) that are outside XLA's clusters, each once, as TensorFlow's clustering "
    "summary counts them: not its bookkeeping nodes (_Arg, _Retval, NoOp, Const), nor the nodes that launch "
    "a cluster, nor those a later pass took back out of a cluster (partial declustering). Times are the trace "
    "window's: TensorFlow traces an op kernel only while it deems it expensive (over 8000 CPU cycles by its "
    "running estimate; Squeeze, Reshape, Identity never), so nodes_timed says how many of an op type's nodes "
    "have a time; kernels of other functions (the input pipeline's) are not the step's"
)
COUNTED_FROM_TRACE = (
    "the op kernels the trace window saw run, each node once (the step's graph was not kept, so a node whose "
    "kernel TensorFlow deems cheap, under 8000 CPU cycles by its running estimate, and never traces is "
    "missing: Squeeze, Reshape, Identity): TensorFlow's bookkeeping nodes (_Arg, _Retval, NoOp, Const) run no "
    "kernel there and are not counted; _XlaCompile and _XlaMerge (XLA's launch) count on neither side"
)

OTHER_PHASES = "test and predict: withheld, their steps are not traced (the trace window holds train steps)"


ON_AN_ACCELERATOR = (
    "withheld on a GPU or TPU: the host's events of op kernels and of _XlaRun are launch times there, not the "
    "time the ops take on the device"
)


@dataclass(frozen=True)
class GraphNode:
    """One node of the step's graph as TensorFlow's executor runs it."""

    name: str
    op: str
    declustered: bool = False  # XLA's clustering took it and a later pass gave it back (partial declustering)
    dtype: Optional[str] = None  # the dtype its op works on (a lookup's keys), when the graph says


def _launch_scopes(graph: Sequence[GraphNode]) -> set:
    """The scopes of the nodes that launch XLA's clusters (``cluster_0_1/xla_compile``, ``.../xla_run``,
    their switches and merges, and the fallback call): one per cluster."""
    return {node.name.rpartition("/")[0] for node in graph if node.op in (XLA_COMPILE, XLA_RUN)} - {""}


def _graph_name(event_node: str, names: Any) -> Optional[str]:
    """The graph node a trace event's node name is (the step called from another function runs its nodes
    under that call's scope: ``StatefulPartitionedCall/functional_1/dense_1/Relu``)."""
    name = event_node
    while True:
        if name in names:
            return name
        _, slash, name = name.partition("/")
        if not slash:
            return None


def step_graph(graphs: Sequence[Sequence[GraphNode]], events: Sequence[Tuple[str, int]]) -> Optional[List[GraphNode]]:
    """The graph that ran in a trace window: of the graphs kept, the one holding the most of the window's op
    kernels (the latest on a tie); None when none holds any."""
    nodes = [match.group(1) for match in map(_OP_EVENT.match, (name for name, _ in events)) if match]
    best: Optional[List[GraphNode]] = None
    best_seen = 0
    for graph in graphs:
        names = {node.name for node in graph}
        seen = sum(1 for node in nodes if _graph_name(node, names) is not None)
        if seen and seen >= best_seen:
            best, best_seen = list(graph), seen
    return best


def node_time_ps(durations: Sequence[int]) -> int:
    """One node's op time in a trace window: its median run times its runs. A run the OS preempted (a
    stall of milliseconds in a kernel of microseconds) would otherwise decide which op type holds the most
    time, and so the advice; a node that ran once keeps its one run."""
    return round(statistics.median(durations) * len(durations))


def trace_coverage(
    events: Iterable[Tuple[str, int]],
    layer_names: Iterable[str],
    steps: int,
    op_time: bool = True,
    graph: Optional[Sequence[GraphNode]] = None,
) -> Optional[Dict[str, Any]]:
    """Coverage of the step by XLA's clusters over a trace window's ``steps`` train steps: each op type
    outside (its nodes, their layers, their time per step and share of the op time, the reason), the op time
    under ``_XlaRun`` against the rest, and the advice. The nodes come from ``graph`` (the step's graph as
    TensorFlow runs it), whatever the window saw; their times from the window's events
    (``(name, duration_ps)``: each node's median run times its runs, ``node_time_ps``). Without the graph,
    the nodes are the op kernels the window saw (TensorFlow traces no cheap kernel: some are missing). None
    when neither names an op. ``op_time`` False (an accelerator): the counts stand, the times are withheld
    (``ON_AN_ACCELERATOR``)."""
    names = list(layer_names)
    inside_ps, clusters = 0, set()
    outside: Dict[str, Dict[str, Any]] = {}

    def entry(kind: str) -> Dict[str, Any]:
        return outside.setdefault(op_type(kind), {"nodes": set(), "timed": set(), "ps": 0, "dtypes": set()})

    members: Dict[str, Optional[GraphNode]] = {}  # graph nodes outside XLA by name; None: launch or declustered
    if graph is not None:
        launch = _launch_scopes(graph)
        for node in graph:
            if node.op == XLA_RUN:
                clusters.add(node.name)
            if node.op in BOOKKEEPING or node.declustered or node.name.rpartition("/")[0] in launch:
                members.setdefault(node.name, None)
                continue
            members[node.name] = node
            found = entry(node.op)
            found["nodes"].add(node.name)
            if node.dtype:
                found["dtypes"].add(node.dtype)
    seen_any = bool(outside or clusters)
    runs: Dict[Tuple[str, str], List[int]] = {}  # (node, kernel) -> its runs' durations in the window
    for name, duration_ps in events:
        match = _OP_EVENT.match(name)
        if not match:
            continue
        node_name, kernel = match.groups()
        if graph is not None:
            member = _graph_name(node_name, members)
            if member is None:
                continue  # another function's kernel (the input pipeline's): not the step's
            node_name = member
        seen_any = True
        runs.setdefault((node_name, kernel), []).append(duration_ps)
    if not seen_any:
        return None
    for (node_name, kernel), durations in runs.items():
        ps = node_time_ps(durations)
        if kernel == XLA_RUN:
            inside_ps += ps
            clusters.add(node_name)
        elif kernel not in XLA_LAUNCH and (graph is None or members[node_name] is not None):
            member_node = members.get(node_name)
            found = entry(member_node.op if member_node is not None else kernel)
            found["nodes"].add(node_name)
            found["timed"].add(node_name)
            found["ps"] += ps
    total_ps = inside_ps + sum(found["ps"] for found in outside.values())
    ops: List[Dict[str, Any]] = []
    whys: List[Why] = []
    for kind, found in sorted(outside.items(), key=lambda item: (-item[1]["ps"], -len(item[1]["nodes"]), item[0])):
        timed = bool(found["timed"])
        whys.append(why_outside(kind, found["dtypes"]))
        ops.append(
            {
                "op": kind,
                "nodes": len(found["nodes"]),
                "nodes_timed": len(found["timed"]),
                "layers": sorted(
                    {layer for node in found["nodes"] if (layer := layer_named(node.split("/")[:-1], names))}
                ),
                "seconds_per_step": found["ps"] / steps / 1e12 if timed else None,
                "share": found["ps"] / total_ps if timed and total_ps else None,
                "reason": whys[-1].words(kind),
            }
        )
    advice, no_advice = _advice(ops, whys, op_time)
    coverage: Dict[str, Any] = {
        "phase": "train",
        "steps": steps,
        "clusters": len(clusters),
        "share_inside": inside_ps / total_ps if total_ps else None,
        "inside_seconds_per_step": inside_ps / steps / 1e12,
        "outside_seconds_per_step": (total_ps - inside_ps) / steps / 1e12,
        "nodes_outside": sum(op["nodes"] for op in ops),
        "ops_outside": ops,
        "advice": advice,
        "no_advice": no_advice,
        "nodes_from": "graph" if graph is not None else "trace",
        "counted": COUNTED if graph is not None else COUNTED_FROM_TRACE,
        "other_phases": OTHER_PHASES,
    }
    if not op_time:
        coverage.update(share_inside=None, inside_seconds_per_step=None, outside_seconds_per_step=None)
        coverage["withheld"] = ON_AN_ACCELERATOR
        for op in ops:
            op.update(seconds_per_step=None, share=None)
    return coverage


def _advice(
    ops: List[Dict[str, Any]], whys: List[Why], op_time: bool
) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    """The advice: the op type outside with the most op time that has a known fix, at least
    ``ADVICE_MIN_SHARE`` of the op time where times are measured (an op type no kernel of which was traced
    ran under TensorFlow's "expensive" mark: it is below that too). None, with the reason, when none is."""
    fixable = [(op, why) for op, why in zip(ops, whys) if why.fix]
    if not fixable:
        return None, "no op type outside XLA has a known fix"
    if op_time:
        large = [(op, why) for op, why in fixable if (op["share"] or 0.0) >= ADVICE_MIN_SHARE]
        if not large:
            top = fixable[0][0]
            held = f"{top['share']:.1%}" if top["share"] is not None else "no traced time"
            return None, (
                f"no op type outside XLA with a known fix holds {ADVICE_MIN_SHARE:.0%} of the op time (the most: "
                f"{top['op']}, {held}): no fix is worth its change"
            )
        fixable = large
    chosen, why = fixable[0]
    return {
        "op": chosen["op"],
        "fix": why.fix,
        "code": why.code,  # None: the fix is words
        "effect": why.effect.format(op=chosen["op"]) if why.effect else None,
    }, None


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
