"""The package's shape, checked from its source: imports, cycles, size limits, purity, private APIs.

Pure and fast (no fit): the rules of the house in docs/architecture.md.
"""

import ast
import functools
import os
import random
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE_DIR = os.path.join(ROOT, "xla_keras")

# Sanity limits, not targets: a module holds one idea (split by idea, never by a line count).
MONITOR_MAX_LINES, MODULE_MAX_LINES, CLASS_MAX_LINES = 600, 800, 500

# Pure by design: every module of these subpackages, found on disk, imports no framework.
PURE_PACKAGES = (
    "xla_keras.core",
    "xla_keras.storms",
    "xla_keras.report",
    "xla_keras.jit",
    "xla_keras.data",
    "xla_keras.session",
)
PURE_MODULES = ("xla_keras", "xla_keras.config", "xla_keras.errors")
# The framework paths of xla_keras.data (tf.data, PyDataset) may import their framework: the rest
# of it (the public functions, the planning) is pure.
DATA_FRAMEWORK_MODULES = ("xla_keras.data.tfdata", "xla_keras.data.arrays")
# Outside the pure subpackages, these promise no framework import too (the 0.2 list, and the modules
# whose docstrings say so): the tab's views and metadata, the sink, parts of the callback, the
# backends' facades and their framework-free helpers.
ALSO_PURE = (
    "xla_keras.backends",
    "xla_keras.backends.base",
    "xla_keras.backends.chain",
    "xla_keras.backends.keras.pipeline_move",
    "xla_keras.backends.keras_backend",
    "xla_keras.backends.base",
    "xla_keras.backends.tensorflow",
    "xla_keras.backends.tensorflow.flags",
    "xla_keras.backends.tensorflow.quiet",
    "xla_keras.backends.tensorflow.trace_events",
    "xla_keras.callback.reports",
    "xla_keras.callback.guards",
    "xla_keras.callback.traces",
    "xla_keras.tensorboard",
    "xla_keras.tensorboard.metadata",
    "xla_keras.tensorboard.sink",
    "xla_keras.tensorboard.views",
    "xla_keras.tools.explain",
)
FRAMEWORKS = ("tensorflow", "keras", "jax", "tensorboard")

# Private framework modules: only backends/<name>/_internals.py may import them.
PRIVATE_FRAMEWORK_PREFIXES = (
    "tensorflow.python",
    "tensorflow.core",
    "tensorflow.compiler",
    "tensorflow.tsl",
    "keras.src",
    "tf_keras.src",
    "jax._src",
    "jaxlib",
)
FRAMEWORK_ROOTS = ("tensorflow", "keras", "tf_keras", "jax")


# ------------------------------------------------------------------ the package on disk


def _modules():
    """{module name: file path} for every .py file of the package."""
    found = {}
    for folder, dirs, files in os.walk(PACKAGE_DIR):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and d != "static")
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            parts = os.path.relpath(path, ROOT)[: -len(".py")].split(os.sep)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _rel(path):
    return os.path.relpath(path, ROOT)


def _tree(module):
    with open(MODULES[module], encoding="utf-8") as f:
        return ast.parse(f.read(), MODULES[module])


def _is_type_checking(node):
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(tree, type_checking=False):
    """Every Import / ImportFrom that can run, at any depth (functions too); not `if TYPE_CHECKING:`
    unless ``type_checking`` (the layers count what a module needs to be read, not only to run)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node) and not type_checking:
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


@functools.cache
def _lazy_names():
    """The root package's PEP 562 map {public name: module}: `from xla_keras import X` imports it."""
    lazy = {}
    for node in _tree("xla_keras").body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_LAZY" for t in node.targets):
            for key, value in zip(node.value.keys, node.value.values):
                lazy[key.value] = "xla_keras." + value.value
    return lazy


def _import_edges(module, type_checking=False):
    """{imported package module: line} for one module, resolving relative and `from a import b` forms
    (``type_checking``: the imports under `if TYPE_CHECKING:` too)."""
    is_package = os.path.basename(MODULES[module]) == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    lazy = _lazy_names()
    edges = {}
    for node in _runtime_imports(_tree(module), type_checking):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            targets = []
            for alias in node.names:
                full = f"{source}.{alias.name}"
                if full in MODULES:
                    targets.append(full)  # a submodule: `from xla_keras.a import b`
                elif source == "xla_keras" and alias.name in lazy:
                    targets.append(lazy[alias.name])  # a lazy public name loads its module
                else:
                    targets.append(source)
        for target in targets:
            while target and target not in MODULES:  # `import xla_keras.a.b.Name` never parses, but be safe
                target = target.rpartition(".")[0]
            if target and target != module and target.startswith("xla_keras"):
                edges.setdefault(target, node.lineno)
    return edges


# ------------------------------------------------------------------ every module imports, names stay


_IMPORT_EVERYTHING = r"""
import importlib, inspect, random, sys, types
seed, names = int(sys.argv[1]), sys.argv[2:]
random.Random(seed).shuffle(names)
for i, name in enumerate(names):
    try:
        importlib.import_module(name)
    except Exception as e:
        sys.exit(f"import {name} failed ({type(e).__name__}: {e}); imported before it: {names[:i]}")
import xla_keras
FUNCTIONS = {"configure", "doctor", "compare", "parse_report", "jit_decision", "forget_jit_decision"}
CLASSES = {"XlaMonitor", "XlaReport", "Compilation", "SlowStep", "Storm", "CompareTable", "MonitorConfig",
           "PhaseAdvice", "ProgramCost"}
EXCEPTIONS = {"RecompilationStormError": Exception, "UnsupportedOpError": Exception, "LogDirError": Exception,
              "CompileAfterPrecompileError": Exception, "XlaKerasWarning": Warning}
wrong = []
for name in xla_keras.__all__:
    value = getattr(xla_keras, name)
    if name in FUNCTIONS:
        ok = inspect.isfunction(value)
    elif name in CLASSES:
        ok = inspect.isclass(value)
    elif name in EXCEPTIONS:
        ok = inspect.isclass(value) and issubclass(value, EXCEPTIONS[name])
    elif name == "data":
        ok = isinstance(value, types.ModuleType) and all(
            inspect.isfunction(getattr(value, f, None)) for f in ("apply_fix", "bucket_by_length", "pad_to_lengths"))
    elif name == "testing":
        ok = isinstance(value, types.ModuleType) and inspect.isclass(getattr(value, "expect_compiles", None))
    elif name == "__version__":
        ok = isinstance(value, str)
    else:
        ok = False  # a new public name: say here what it must stay
    if inspect.isfunction(value) or inspect.isclass(value):
        ok = ok and value.__module__.split(".")[0] == "xla_keras"
    if not ok:
        wrong.append(f"xla_keras.{name} is {value!r}")
import xla_keras.multiworker
if not isinstance(xla_keras.multiworker.WORKAROUND, str):
    wrong.append(f"xla_keras.multiworker.WORKAROUND is {xla_keras.multiworker.WORKAROUND!r}")
if wrong:
    sys.exit("after importing every module: " + "; ".join(wrong))
"""


def _import_everything(backend, seed):
    env = dict(os.environ, KERAS_BACKEND=backend, PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("TF_XLA_FLAGS", None)
    names = sorted(MODULES)
    return subprocess.run(
        [sys.executable, "-c", _IMPORT_EVERYTHING, str(seed), *names],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow  # two interpreters importing TensorFlow and JAX: a third of the quick tier's CPU
def test_every_module_imports_in_any_order_and_public_names_stay_what_they_are():
    seed = int(os.environ.get("XLA_KERAS_IMPORT_SEED", random.randrange(2**32)))
    backends = ("tensorflow", "jax")
    with ThreadPoolExecutor(max_workers=2) as pool:  # one fresh process per Keras backend, side by side
        results = dict(zip(backends, pool.map(lambda b: _import_everything(b, seed), backends)))
    failures = [
        f"KERAS_BACKEND={b}: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}"
        for b, r in results.items()
        if r.returncode != 0
    ]
    assert not failures, f"seed {seed} (rerun with XLA_KERAS_IMPORT_SEED={seed}):\n" + "\n".join(failures)


def test_no_public_name_is_also_a_submodule_of_the_package():
    # A submodule named like a lazy public function replaces it once imported (the 0.2 doctor bug).
    import xla_keras

    modules = {name.split(".")[1] for name in MODULES if name.count(".") >= 1}
    shadowed = sorted((set(xla_keras.__all__) - {"data", "testing"}) & modules)  # the public modules
    assert not shadowed, f"public names shadowed by a submodule of the same name: {shadowed}"


# ------------------------------------------------------------------ no import cycles


def _cycles(graph):
    """Each strongly connected component of more than one module, as one cycle through it."""
    index, low, on_stack, stack, components = {}, {}, set(), [], []

    def visit(node):  # Tarjan; the package has ~70 modules, recursion depth is fine
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    cycles = []
    for component in components:
        start = min(component)
        path, seen = [start], {start}
        while True:  # walk inside the component until a module repeats: that loop is a cycle
            nxt = min(n for n in graph[path[-1]] if n in component)
            if nxt in seen:
                cycles.append(path[path.index(nxt) :] + [nxt])
                break
            path.append(nxt)
            seen.add(nxt)
    return cycles


def test_no_import_cycle_between_the_packages_modules():
    edges = {module: _import_edges(module) for module in MODULES}
    graph = {module: sorted(targets) for module, targets in edges.items()}
    described = []
    for cycle in _cycles(graph):
        steps = [f"{a} (line {edges[a][b]}) -> {b}" for a, b in zip(cycle, cycle[1:])]
        described.append("\n    ".join(steps))
    assert not described, "import cycles (imports inside functions count):\n    " + "\n\n    ".join(described)


# ------------------------------------------------------------------ layers

# The package's layers, bottom first: a module imports only from its own layer or below. A unit is a
# subpackage or a top-level module; the root (`xla_keras/__init__.py`: `__version__`, the public names
# loaded lazily) imports nothing of the package, so it is base.
LAYERS = {
    "base": ("xla_keras", "errors", "core"),
    "analysis": ("jit", "storms", "data"),
    "report records": ("report",),
    "session": ("config", "session"),
    "presentation": ("tensorboard",),
    "runtime": ("backends", "callback", "monitor", "tools", "multiworker", "testing", "pytest_plugin", "__main__"),
}
# Every package-level edge there is (TYPE_CHECKING imports included), each downward or within a layer one
# way. A new edge is a decision: add it here, in its layer's order.
ALLOWED_EDGES = {
    "core": {"errors", "xla_keras"},
    "jit": {"core", "storms"},
    "storms": {"core"},
    "data": {"core", "storms"},
    "report": {"core", "jit", "storms", "xla_keras"},
    "config": {"core", "jit", "storms"},
    "session": {"config", "core", "jit", "report", "storms"},
    "tensorboard": {"core", "report", "storms"},
    "backends": {"core", "errors", "jit", "session", "storms", "xla_keras"},
    "callback": {"backends", "config", "core", "errors", "jit", "report", "session", "storms", "tensorboard"},
    "monitor": {"backends", "callback", "config", "core", "errors", "report", "session", "tensorboard"},
    "tools": {"backends", "core", "jit", "monitor", "report", "tensorboard", "xla_keras"},
    "multiworker": {"backends"},
    "testing": {"core", "tensorboard", "xla_keras"},
    "pytest_plugin": {"testing"},
    "__main__": {"tools"},
}


def _unit(module):
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "xla_keras"


def _package_edges():
    """{(unit, unit): [module -> module, ...]} read with `ast`, TYPE_CHECKING imports included."""
    edges = {}
    for module in MODULES:
        for target in _import_edges(module, type_checking=True):
            if _unit(module) != _unit(target):
                edges.setdefault((_unit(module), _unit(target)), []).append(f"{module} -> {target}")
    return edges


def test_the_allowed_edges_point_down_the_layers_and_never_both_ways():
    rank = {unit: i for i, units in enumerate(LAYERS.values()) for unit in units}
    assert sorted(rank) == sorted({_unit(m) for m in MODULES}), "every unit in exactly one layer"
    allowed = {(a, b) for a, targets in ALLOWED_EDGES.items() for b in targets}
    upward = sorted((a, b) for a, b in allowed if rank[a] < rank[b])
    assert not upward, f"allowed edges that point up the layers: {upward}"
    both = sorted((a, b) for a, b in allowed if (b, a) in allowed)
    assert not both, f"allowed both ways: {both}"


def test_the_package_level_imports_are_the_allowed_edges():
    edges = _package_edges()
    allowed = {(a, b) for a, targets in ALLOWED_EDGES.items() for b in targets}
    other = {edge: edges[edge][:3] for edge in sorted(set(edges) - allowed)}
    assert not other, f"imports across units that ALLOWED_EDGES does not list (see LAYERS): {other}"
    gone = sorted(allowed - set(edges))
    assert not gone, f"allowed edges no import uses any more (remove them from ALLOWED_EDGES): {gone}"


def test_the_layer_check_reads_type_checking_imports_and_refuses_an_upward_one():
    source = "if TYPE_CHECKING:\n    from xla_keras.session.phases import PhaseStats\n"
    tree = ast.parse(source)
    assert not list(_runtime_imports(tree))  # it never runs ...
    (node,) = _runtime_imports(tree, type_checking=True)  # ... but the layers count it
    assert _unit(node.module) == "session" and "session" not in ALLOWED_EDGES["core"]


def test_no_import_cycle_inside_the_callback_even_for_the_type_checker():
    # The callback's parts are a tree: none is kept acyclic by `if TYPE_CHECKING:` alone.
    callback = [m for m in MODULES if m.startswith("xla_keras.callback.")]
    graph = {m: sorted(t for t in _import_edges(m, type_checking=True) if t in callback) for m in callback}
    assert _cycles(graph) == []
    assert not [m for m in callback if "TYPE_CHECKING" in open(MODULES[m], encoding="utf-8").read()]


def _writes_into_another_object(tree):
    """``self.a.b = ...`` (and ``+=``, annotated) in ``tree``: a write into an attribute of another object."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for part in ast.walk(target):
                    inner = getattr(part, "value", None)
                    if isinstance(part, ast.Attribute) and isinstance(inner, ast.Attribute):
                        if isinstance(inner.value, ast.Name) and inner.value.id == "self":
                            yield node.lineno, inner.attr, ast.unparse(target)


def test_the_parts_are_given_what_they_call_at_construction_and_write_only_their_own_attributes():
    # The monitor wires nothing after construction (the step path hands storms and compiles up through
    # the `CallEvents` it was given), and a part writes only itself and the shared `CallState`.
    parts = [m for m in MODULES if m.startswith("xla_keras.callback.")] + ["xla_keras.monitor"]
    found = {
        f"{module}:{line}": text
        for module in parts
        for line, owner, text in _writes_into_another_object(_tree(module))
        if owner != "state"
    }
    assert not found, found
    # The check sees such a write (the wiring the monitor once had).
    source = "def __init__(self):\n    self._steps.on_storm = self._action.opened\n    self.state.in_fit = True\n"
    assert list(_writes_into_another_object(ast.parse(source))) == [
        (2, "_steps", "self._steps.on_storm"),
        (3, "state", "self.state.in_fit"),
    ]


def test_no_two_modules_define_one_public_name_unless_per_backend():
    # A name means one thing in the package; the backends implement the same role each (`configure`,
    # `StepWrappers`, `findings`, ...), one module per backend.
    defined = {}
    for module in MODULES:
        for node in _tree(module).body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and not node.name.startswith("_"):
                defined.setdefault(node.name, []).append(module)
    twice = {
        name: modules
        for name, modules in sorted(defined.items())
        if len(modules) > 1 and not all(m.startswith("xla_keras.backends") for m in modules)
    }
    assert not twice, f"one public name, several meanings (rename one): {twice}"


def test_the_cycle_finder_finds_a_cycle_and_passes_a_tree():
    assert _cycles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c", "a"]]
    assert _cycles({"a": ["b", "c"], "b": ["c"], "c": []}) == []


# ------------------------------------------------------------------ size limits


def test_modules_and_classes_stay_within_the_size_limits():
    over = []
    for module, path in MODULES.items():
        with open(path, encoding="utf-8") as f:
            source = f.read()
        limit = MONITOR_MAX_LINES if module == "xla_keras.monitor" else MODULE_MAX_LINES
        lines = len(source.splitlines())
        if lines > limit:
            over.append(f"{_rel(path)}: {lines} lines (limit {limit})")
        for node in ast.walk(ast.parse(source, path)):
            if isinstance(node, ast.ClassDef):
                size = node.end_lineno - node.lineno + 1
                if size > CLASS_MAX_LINES:
                    over.append(f"{_rel(path)}:{node.lineno} class {node.name}: {size} lines (limit {CLASS_MAX_LINES})")
    assert not over, "over the size limits (split by responsibility):\n" + "\n".join(over)


# ------------------------------------------------------------------ pure modules


def _pure_modules():
    pure = set(PURE_MODULES) | set(ALSO_PURE)
    for package in PURE_PACKAGES:
        pure |= {m for m in MODULES if m == package or m.startswith(package + ".")}
    return sorted(pure - set(DATA_FRAMEWORK_MODULES))


def test_pure_modules_import_without_any_framework():
    pure = _pure_modules()
    gone = [m for m in pure if m not in MODULES]
    assert not gone, f"moved or renamed? update the lists at the top of this file: {gone}"
    code = (
        "import importlib, sys\n"
        f"for m in {pure!r}:\n"
        "    importlib.import_module(m)\n"
        f"    heavy = [f for f in {FRAMEWORKS!r} if f in sys.modules]\n"
        "    assert not heavy, f'importing {m} imported {heavy}'"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=dict(os.environ, PYTHONPATH=ROOT),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"a pure module imported a framework (checked {len(pure)} modules):\n{proc.stderr}"
    assert {"xla_keras.session.session", "xla_keras.session.storm_analysis", "xla_keras.report.model"} <= set(pure)


# ------------------------------------------------------------------ private framework APIs


def _private_framework_module(name):
    if name.startswith(PRIVATE_FRAMEWORK_PREFIXES):
        return True
    parts = name.split(".")
    return parts[0] in FRAMEWORK_ROOTS and any(p.startswith("_") for p in parts[1:])


def test_private_framework_apis_stay_in_the_backends_internals():
    found = []
    for module, path in MODULES.items():
        if module.startswith("xla_keras.backends.") and module.endswith("._internals"):
            continue
        for node in ast.walk(_tree(module)):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            elif (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__")
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                names = [node.args[0].value]
            else:
                continue
            private = sorted({n for n in names if _private_framework_module(n)})
            if private:
                found.append(f"{_rel(path)}:{node.lineno} imports {private[0]}")
    assert not found, "private framework APIs outside backends/<name>/_internals.py:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "text, filename, bad",
    [
        ("Recompilation storm (train): 8 new input shapes\nCause: x\nFix: y\nMore: z", "/u/train.py", False),
        ("one line of " + "x" * 100, "/u/train.py", True),  # 111 characters
        ("1\n2\n3\n4\n5", "/u/train.py", True),  # five lines
        ("short", "/site-packages/xla_keras/callback/step_path.py", True),  # located in our code
        ("short", "/site-packages/keras/src/trainers/trainer.py", True),  # or in Keras's
    ],
)
def test_the_per_test_message_check_catches_long_or_misplaced_warnings(text, filename, bad):
    """conftest's per-test check (the autouse fixture's rule), fed one warning as it records them."""
    import warnings

    import conftest

    from xla_keras.errors import XlaKerasWarning

    assert conftest._bad_shape(warnings.WarningMessage(XlaKerasWarning(text), XlaKerasWarning, filename, 7)) is bad


def test_every_module_is_on_the_map_and_the_map_names_only_modules():
    """docs/architecture.md's module table lists every module of the package, one row each, and no
    module that is gone (a package's ``__init__.py`` that holds only its docstring may stay off it)."""
    here = os.path.dirname(os.path.abspath(__file__))
    package = os.path.join(os.path.dirname(here), "xla_keras")
    with open(os.path.join(os.path.dirname(here), "docs", "architecture.md"), encoding="utf-8") as f:
        rows = re.findall(r"^\| `([\w/]+\.py)` \|", f.read(), re.M)
    modules = set()
    for root, _, files in os.walk(package):
        for name in files:
            path = os.path.join(root, name)
            if name.endswith(".py") and (name != "__init__.py" or _holds_code(path)):
                modules.add(os.path.relpath(path, package).replace(os.sep, "/"))
    assert sorted(set(rows) - modules) == [], "on the map, no longer a module"
    assert sorted(modules - set(rows)) == [], "modules missing from docs/architecture.md's table"
    assert len(rows) == len(set(rows)), "a module listed twice"


def _holds_code(path):
    with open(path, encoding="utf-8") as f:
        body = ast.parse(f.read()).body
    return any(not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)) for node in body)
