"""Every public name's docstring: Google-style sections as Keras writes them, and examples
that run.

Public: every name in ``xla_keras.__all__`` and ``xla_keras.data.__all__``, and the methods and
properties a user calls on them (``MEMBERS``). Each has a one-line summary, ``Args:`` naming exactly
the parameters (a class: its constructor's), ``Returns:`` when it returns something and, for the
names themselves, an ``Example:`` of doctest lines (in a ```` ```pycon ```` block, which mkdocstrings
renders as code). The examples use the public names only: ``xla_keras`` and ``np`` are given, as
Keras's examples assume ``keras`` and ``np``.

The quick tests check the sections and run every example that needs no fit. ``test_fit_examples``
(slow) runs the others in this process, each with a fresh tiny compiled model ``model`` and its data
``x``, ``y`` (64 rows); a few use what an earlier example built (``monitor``: XlaMonitor's,
``table``: compare's), in ``FIT_EXAMPLES``' order.
"""

import ast
import doctest
import importlib
import inspect
import re
import warnings

import numpy as np
import pytest

import xla_keras
import xla_keras.data

# Methods and properties a user calls, per public class (the rest of a class is its own wiring).
MEMBERS = {
    "XlaMonitor": ("report", "reports", "log_dir", "error", "model"),
    "XlaReport": ("total_compilations", "to_dict", "from_dict", "to_json", "from_json", "details", "to_markdown"),
    "Compilation": ("to_dict", "from_dict"),
    "ProgramCost": ("peak_bytes", "to_dict", "from_dict"),
    "SlowStep": ("to_dict", "from_dict"),
    "Storm": ("to_dict", "from_dict"),
    "PhaseAdvice": ("to_dict", "from_dict"),
    "CompareTable": ("to_dict",),
}

# Examples that need a fit (or a model), in the order test_fit_examples runs them, with the names
# each one leaves for the later ones.
FIT_EXAMPLES = (
    ("XlaMonitor", ("monitor",)),
    ("XlaMonitor.report", ()),
    ("XlaMonitor.reports", ()),
    ("XlaReport", ()),
    ("Compilation", ()),
    ("Storm", ()),
    ("RecompilationStormError", ()),
    ("UnsupportedOpError", ()),
    ("CompileAfterPrecompileError", ()),
    ("XlaKerasWarning", ()),
    ("LogDirError", ()),
    ("compare", ("table",)),
    ("CompareTable", ()),
    ("CompareTable.to_dict", ()),
    ("jit_decision", ()),
    ("forget_jit_decision", ()),
)
FIT_NAMES = {name for name, _ in FIT_EXAMPLES}

# Constants: their docstring is the string literal after the assignment (PEP 257's attribute
# docstring, which mkdocstrings reads), in the module that assigns them.
CONSTANTS = {"__version__": "xla_keras", "APPLIED_KINDS": "xla_keras.storms.fixes"}

SECTION = re.compile(r"^(Args|Returns|Raises|Example):$", re.M)
FENCE = re.compile(r"^```(pycon)?$")


def attribute_docstring(module_name, name):
    module = importlib.import_module(module_name)
    body = ast.parse(inspect.getsource(module)).body
    for node, after in zip(body, body[1:]):
        targets = node.targets if isinstance(node, ast.Assign) else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                return inspect.cleandoc(after.value.value)
    return None


def public():
    """(name, object, docstring) of every public name and member; the object is None for a constant."""
    items = []
    names = [(n, xla_keras) for n in xla_keras.__all__] + [(n, xla_keras.data) for n in xla_keras.data.__all__]
    for name, owner in names:
        if name in CONSTANTS:
            items.append((name, None, attribute_docstring(CONSTANTS[name], name)))
            continue
        obj = getattr(owner, name)
        items.append((name, obj, inspect.getdoc(obj)))
        for member in MEMBERS.get(name, ()):
            raw = inspect.getattr_static(obj, member)
            function = raw.fget if isinstance(raw, property) else getattr(obj, member)
            items.append((f"{name}.{member}", raw, inspect.getdoc(function)))
    return items


PUBLIC = public()


def parameters(obj):
    """The parameters a docstring's Args: must name: a function's, a class's constructor's (none for
    an exception, whose constructor is the builtin one), none for a property or a module."""
    if obj is None or inspect.ismodule(obj) or isinstance(obj, property):
        return []
    if isinstance(obj, (classmethod, staticmethod)):
        obj = obj.__func__
    if inspect.isclass(obj):
        if issubclass(obj, BaseException) or "__init__" not in vars(obj):
            return []
        obj = obj.__init__
    names = list(inspect.signature(obj).parameters)
    return [n for n in names if n not in ("self", "cls")]


def returns_something(obj):
    if isinstance(obj, property):
        return True
    if isinstance(obj, (classmethod, staticmethod)):
        obj = obj.__func__
    if not callable(obj) or inspect.isclass(obj):
        return False
    return inspect.signature(obj).return_annotation not in (None, "None", inspect.Signature.empty)


def documented_args(doc):
    """The names the Args: section documents (Google style: ``name: text``, or ``name (type): text``)."""
    section = re.search(r"^Args:\n((?:[ \t]+.*\n?|\n)+)", doc, flags=re.M)
    if not section:
        return []
    indent = min(len(line) - len(line.lstrip()) for line in section.group(1).splitlines() if line.strip())
    return re.findall(rf"^ {{{indent}}}(\*{{0,2}}\w+)(?: \([^)]*\))?:", section.group(1), flags=re.M)


def problems(name, obj, doc):
    if not doc:
        return [f"{name}: no docstring"]
    found = []
    summary = doc.split("\n\n")[0]
    if "\n" in summary or not summary.endswith("."):
        found.append(f"{name}: the first line is no one-sentence summary standing alone: {summary[:80]!r}")
    sections = SECTION.findall(doc)
    args = documented_args(doc)
    wanted = parameters(obj)
    if wanted and "Args" not in sections:
        found.append(f"{name}: no Args: section (parameters {wanted})")
    elif args != wanted:
        found.append(f"{name}: Args: names {args}, the parameters are {wanted}")
    if returns_something(obj) and "Returns" not in sections:
        found.append(f"{name}: no Returns: section")
    returned = re.search(r"^Returns:\n((?:[ \t]+.*\n?)+)", doc, flags=re.M)
    if returned and len(re.findall(r"^ {4}\S", returned.group(1), flags=re.M)) > 1:
        # mkdocstrings reads each line at the section's indent as one more returned value
        found.append(f"{name}: Returns: continues at its first line's indent (indent it 4 more)")
    if "." not in name:  # a public name: its example is required; a member's where it helps
        if "Example" not in sections:
            found.append(f"{name}: no Example: section")
        elif ">>> " not in doc.split("\nExample:\n", 1)[-1]:
            found.append(f"{name}: its Example: has no doctest line")
    for line in doc.splitlines():
        if line.strip().startswith("```") and not FENCE.match(line.strip()):
            found.append(f"{name}: a code block that is not ```pycon: {line.strip()!r}")
    return found


def test_every_public_name_has_args_returns_and_an_example():
    assert len(PUBLIC) > 30
    found = [p for name, obj, doc in PUBLIC for p in problems(name, obj, doc)]
    assert not found, "\n".join(found)


def test_the_section_check_can_fail():
    def f(a, b=1) -> int:
        """Do a thing.

        Args:
            a: one.
            c: not a parameter.
        """
        return a

    def g(a) -> int:
        """Do a thing.

        Args:
            a: one.

        Returns:
            A value on a line,
            and its continuation at the same indent.
        """
        return a

    found = problems("f", f, inspect.getdoc(f))
    assert any("Args: names ['a', 'c'], the parameters are ['a', 'b']" in p for p in found)
    assert any("no Example" in p for p in found)
    assert "f: no Returns: section" in found
    assert any("Returns: continues" in p for p in problems("g", g, inspect.getdoc(g)))
    assert problems("g", f, None) == ["g: no docstring"]


def run_examples(name, doc, globs):
    """Run a docstring's examples: the failure report ('' when they pass) and the names they left."""
    test = doctest.DocTestParser().get_doctest(doc or "", globs, name, None, 0)
    out = []
    doctest.DocTestRunner(verbose=False).run(test, out=out.append, clear_globs=False)
    return "".join(out), test.globs


@pytest.mark.parametrize("name", [name for name, _, _ in PUBLIC if name not in FIT_NAMES])
def test_the_examples_that_need_no_fit_run(name):
    doc = {n: d for n, _, d in PUBLIC}[name]
    assert ">>> " in (doc or "") or "." in name, name
    failures, _ = run_examples(name, doc, {"xla_keras": xla_keras, "np": np})
    assert not failures, failures


def test_every_fit_example_is_a_public_docstring_with_doctest_lines():
    docs = {n: d for n, _, d in PUBLIC}
    assert FIT_NAMES <= set(docs)
    assert all(">>> " in docs[name] for name in FIT_NAMES)


@pytest.fixture(scope="module")
def tiny():
    """A tiny model's data and a maker of fresh compiled models (one per example: each starts clean)."""
    keras = pytest.importorskip("keras")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype("float32")
    y = rng.normal(size=(64, 1)).astype("float32")

    def model():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        return model

    return keras, x, y, model


@pytest.mark.slow
def test_fit_examples(tiny):
    keras, x, y, new_model = tiny
    docs = {n: d for n, _, d in PUBLIC}
    left, failures = {}, []
    for name, leaves in FIT_EXAMPLES:
        globs = {"xla_keras": xla_keras, "np": np, "keras": keras, "model": new_model(), "x": x, "y": y, **left}
        with warnings.catch_warnings():
            # Keras's own notes on generator data (shuffle ignored, the input ran out): not ours.
            warnings.filterwarnings("ignore", category=UserWarning, module="keras")
            failed, globs = run_examples(name, docs[name], globs)
        failures.append(failed)
        left.update({leaf: globs[leaf] for leaf in leaves if leaf in globs})
    failures = [f for f in failures if f]
    assert not failures, "\n".join(failures)
