"""Explain the TensorFlow / XLA lines of a training log: what each means,
whether it matters, and the fix. Pure: no TensorFlow.

    xla-keras explain train.log        # or: python train.py 2>&1 | xla-keras explain -
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, List, Optional

from xla_keras.jit.coverage import GraphCoverage, clustering_summaries, coverage_lines

_MS = {"h": 3.6e6, "min": 6e4, "s": 1e3, "ms": 1.0, "us": 1e-3}


@dataclass(frozen=True)
class Pattern:
    key: str
    regex: "re.Pattern[str]"
    meaning: str
    matters: str
    fix: str


PATTERNS = [
    Pattern(
        "unknown_tf_xla_flag",
        re.compile(r"Unknown flag in TF_XLA_FLAGS: (\S+)"),
        "TensorFlow found a flag it does not know in TF_XLA_FLAGS and aborted the process at its first op.",
        "Fatal: nothing ran.",
        "Remove or correct the flag (`xla-keras doctor` checks TF_XLA_FLAGS before you start).",
    ),
    Pattern(
        "unknown_xla_flag",
        re.compile(r"Unknown flags? in XLA_FLAGS: (.+)"),
        "XLA found a flag it does not know in XLA_FLAGS and aborted at its first compile.",
        "Fatal.",
        "Remove or correct the flag (`xla-keras doctor` checks XLA_FLAGS).",
    ),
    Pattern(
        "not_using_xla_cpu",
        re.compile(r"Not using XLA:CPU for cluster"),
        "Auto-clustering found clusters to compile, but TensorFlow's CPU global-jit flag is off, so on CPU "
        "they run without XLA.",
        "Yes if you asked for auto-clustering on CPU: XLA is not running.",
        "Start with TF_XLA_FLAGS=--tf_xla_cpu_global_jit, or call xla_keras.configure(cpu_autoclustering=True) "
        "right after import, before any model is built (the flag is read when TensorFlow creates its devices).",
    ),
    Pattern(
        "compiled_cluster",
        re.compile(r"Compiled cluster using XLA!"),
        "XLA compiled something in this process (logged once per process, whatever the number of compiles).",
        "Information: XLA ran at least once. It says nothing about how often it recompiled.",
        "Nothing to fix. To count compiles and their cost, use XlaMonitor.",
    ),
    Pattern(
        "compile_time",
        re.compile(
            r"Compilation of XLA executable time: ([0-9.]+) (h|min|s|ms|us)\b"
            r"(?: \((\d+) us\))?"
        ),
        "One XLA compile and how long it took (TF_CPP_VMODULE=device_compiler=1).",
        "Many of these during training means recompiles: each new input shape compiles again.",
        "If they keep coming, fix the input shapes (XlaMonitor names the input and axis and computes "
        "padding lengths), or switch XLA off for this model.",
    ),
    Pattern(
        "megamorphic",
        re.compile(r"megamorphic", re.IGNORECASE),
        "A cluster compiled more than 10 times with fewer than 50 runs per compile: TensorFlow marked it "
        "megamorphic and runs it without XLA from now on.",
        "Yes: those compiles were wasted and that part of the graph no longer uses XLA.",
        "Make the shapes stable (fixed batch size, drop_remainder=True, padding to a few lengths).",
    ),
    Pattern(
        "retracing",
        re.compile(r"triggered tf\.function retracing"),
        "A tf.function was traced again: Python arguments or tensor shapes/dtypes changed between calls.",
        "Tracing costs time; under XLA each new concrete shape also compiles (even when tracing relaxes "
        "shapes to None), so the same cause usually recompiles too.",
        "Pass tensors, not Python values; fix the shapes; or use reduce_retracing=True / an input_signature.",
    ),
    Pattern(
        "keras_refused_jit",
        re.compile(r"Model doesn't support `?jit_compile=True`?"),
        "Keras refused jit_compile=True: a layer has supports_jit=False or op determinism is enabled.",
        "Yes if you expected XLA: the model runs without it (model.jit_compile reads False).",
        "Find the layer (XlaMonitor(jit='on') names it), or accept running without XLA.",
    ),
    Pattern(
        "keras_multi_worker_fit",
        re.compile(r"Attempt to convert a value \(PerReplica:"),
        "Something tried to turn a per-replica value into one tensor. Under MultiWorkerMirroredStrategy "
        "this is Keras 3.15's own fit: it averages the first batch across workers to build the model and "
        "fails before the first step (keras-team/keras#20585). Elsewhere, a PerReplica value reached code "
        "that expects a tensor (e.g. outside strategy.run).",
        "Fatal: the call failed.",
        "Run the patch `xla-keras doctor` prints (with TF_CONFIG set) on every worker before fit, or use a "
        "Keras release with the fix.",
    ),
    Pattern(
        "clustering",
        re.compile(r"\*\*\* Clustering info for graph of size"),
        "Auto-clustering's summary of a graph (TF_CPP_VMODULE=mark_for_compilation_pass=3; level 2 prints "
        "only the totals): the clusters XLA compiles, and the nodes it left to TensorFlow.",
        "Yes where computing nodes stay outside: they run without XLA, and each one splits the step into "
        "more clusters.",
        "Each computing op type outside is listed with its reason and, where one is known, its fix.",
    ),
    Pattern(
        "xla_service",
        re.compile(r"XLA service \S+ initialized for platform (\w+)"),
        "XLA's runtime started for a platform.",
        "Information only: it does not mean XLA compiled or ran anything.",
        "Nothing to fix.",
    ),
]


@dataclass
class LogFinding:
    pattern: Pattern
    count: int = 0
    first_line: int = 0
    examples: List[str] = field(default_factory=list)
    total_ms: float = 0.0
    graphs: List[GraphCoverage] = field(default_factory=list)  # "clustering": each graph's coverage


def explain(lines: Iterable[str]) -> List[LogFinding]:
    """Every known TensorFlow/XLA line in a log, grouped by kind, in order of first appearance."""
    found: dict = {}
    clustering: List[str] = []  # auto-clustering's summary lines, read as a whole at the end
    for number, line in enumerate(lines, start=1):
        if "mark_for_compilation_pass" in line:
            clustering.append(line)
        for pattern in PATTERNS:
            match = pattern.regex.search(line)
            if not match:
                continue
            finding = found.get(pattern.key)
            if finding is None:
                finding = found[pattern.key] = LogFinding(pattern, first_line=number)
            finding.count += 1
            if len(finding.examples) < 2:
                finding.examples.append(line.strip()[:200])
            if pattern.key == "compile_time":  # the exact microseconds when TF prints them
                exact = match.group(3)
                finding.total_ms += int(exact) / 1e3 if exact else float(match.group(1)) * _MS[match.group(2)]
    if "clustering" in found:
        found["clustering"].graphs = clustering_summaries(clustering)
    return sorted(found.values(), key=lambda f: f.first_line)


def render_findings(findings: List[LogFinding], source: Optional[str] = None) -> str:
    if not findings:
        return (
            f"No TensorFlow/XLA lines found{' in ' + source if source else ''}. TensorFlow hides most of them "
            "unless TF_CPP_MIN_LOG_LEVEL=0 (and TF_CPP_VMODULE=device_compiler=1 for compile times)."
        )
    out = []
    for f in findings:
        head = f"[{f.pattern.key}] {f.count} line(s), first at line {f.first_line}"
        if f.pattern.key == "compile_time":
            head += f": {f.count} compiles, {f.total_ms / 1e3:.2f} s in all"
        if f.graphs:
            out += [head, *(f"  {line}" for graph in f.graphs for line in coverage_lines(graph, 98))]
            out += [f"  means   {f.pattern.meaning}", f"  fix     {f.pattern.fix}", ""]
            continue
        out += [
            head,
            f"  e.g.    {f.examples[0]}",
            f"  means   {f.pattern.meaning}",
            f"  matters {f.pattern.matters}",
            f"  fix     {f.pattern.fix}",
            "",
        ]
    return "\n".join(out).rstrip()
