"""Every kind of message the monitor says, from real fits (tests/message_fits.py: a storm, a storm
fallback, a compile-budget advice, jit="fastest", a refusal, a missing Profile tab plugin), as the
user's terminal shows it: each message at most 4 lines of at most 100 characters, the end-of-fit
summary at most 12, each said once. And where a warning is located: at the user's line, past every
installed package's frames (a fake one under a temporary site-packages directory, the standard library;
a real KerasHub task model's fit where keras_hub is installed)."""

import importlib
import importlib.util
import json
import os
import re
import sched
import sys
import warnings

import forked
import pytest
from runs import Runs
from test_quiet import _warnings

from xla_keras.core.messages import library_file, warn
from xla_keras.errors import XlaKerasWarning

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
KINDS = ("storm", "fallback", "budget", "fastest", "refusal", "missing_plugin")

pytestmark = [pytest.mark.xdist_group("test_messages")]


def _fits(root):
    def run():
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # as the script would: TensorFlow reads it at import
        env.pop("TF_XLA_FLAGS", None)
        proc = forked.run(
            [sys.executable, os.path.join(HERE, "message_fits.py"), "all", str(root)],
            env=env,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        return {"stdout": _by_kind(proc.stdout), "stderr": _by_kind(proc.stderr)}

    return {"all": run}


def _by_kind(text):
    """{kind: its lines}, split at the ``=== KIND`` lines message_fits.py prints."""
    out, kind = {}, None
    for line in text.splitlines():
        if line.startswith("=== "):
            kind = line[4:]
            out[kind] = []
        elif kind is not None:
            out[kind].append(line)
    return out


_KERAS = re.compile(r"^(Epoch \d+/\d+|\d+/\d+ - )")  # Keras's own lines under fit(verbose=2)


def _messages(lines):
    """The printed or logged messages: each starts at a line ``xla_keras: ...``."""
    messages = []
    for line in lines:
        if _KERAS.match(line):
            continue
        if line.startswith("xla_keras:"):
            messages.append([line])
        elif messages:
            messages[-1].append(line)
    return messages


@pytest.fixture(scope="module")
def said(tmp_path_factory):
    pytest.importorskip("tensorflow")
    return Runs(_fits, tmp_path_factory, "test_messages::said")["all"]


@pytest.mark.scenario
@pytest.mark.parametrize("kind", KINDS)
def test_every_message_is_4_lines_of_100_characters_and_the_summary_12(said, kind):
    stdout, stderr = said["stdout"][kind], said["stderr"][kind]
    warned = _warnings("\n".join(stderr))
    logged = _messages(line for i, line in enumerate(stderr) if not any(w[0] <= i <= w[1] for w in warned))
    printed = _messages(stdout)
    summaries = [m for m in printed if m[0].startswith("xla_keras: XLA ")]
    assert len(summaries) == 1, printed  # one fit, one summary
    assert len(summaries[0]) <= 12 and max(map(len, summaries[0])) <= 100, summaries[0]
    for message in [m for m in printed if m not in summaries] + logged + [w[3] for w in warned]:
        assert len(message) <= 4 and max(map(len, message)) <= 100, message
    every = [tuple(m) for m in printed + logged + [w[3] for w in warned]]
    assert len(every) == len(set(every)), every  # each said once
    # The kind's own message is there, where a user looks for it.
    words = " ".join(" ".join(m) for m in printed + logged + [w[3] for w in warned])
    expected = {
        "storm": "Recompilation storm (train)",
        "fallback": "XLA off from train step",
        "budget": "ADVICE (train, fit 1): recompiles took",
        "fastest": "fastest      :",
        "refusal": "the model runs eagerly",
        "missing_plugin": "the Profile tab's plugin is not installed",
    }[kind]
    assert expected in words, words


@pytest.mark.scenario
def test_the_summary_names_the_fix_as_code(said):
    summary = _messages(said["stdout"]["budget"])[-1]
    assert "  fix          : ds = xla_keras.data.apply_fix(ds, monitor.report.advice[0].fix)" in summary


# ------------------------------------------------------------------ where a warning points

# A third-party package's model whose fit wraps the framework's, as KerasHub's task models do
# (keras_hub/src/utils/pipeline_model.py: PipelineModel.fit calls super().fit): installed, so its files sit
# in a site-packages directory; its module name is no framework's.
FAKE_HUB = """
def fit(callback, *args):
    return _pipeline_fit(callback, *args)


def _pipeline_fit(callback, *args):
    return callback(*args)  # what the framework's fit does: it calls the callbacks, ours among them
"""


@pytest.fixture
def fake_hub(tmp_path, monkeypatch):
    site = tmp_path / "venv" / "lib" / "site-packages"
    (site / "fakehub").mkdir(parents=True)
    (site / "fakehub" / "__init__.py").write_text(FAKE_HUB)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    module = importlib.import_module("fakehub")
    yield module
    sys.modules.pop("fakehub", None)


def _line_of(marker):
    """The line of this file that ends with ``marker``."""
    with open(__file__) as f:
        (line,) = [i for i, text in enumerate(f, 1) if text.rstrip().endswith(marker)]
    return line


def _located(call):
    """Where Python located the one XlaKerasWarning ``call()`` raised: (file, line)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    (said,) = [w for w in caught if issubclass(w.category, XlaKerasWarning)]
    return said.filename, said.lineno


def test_a_warning_through_an_installed_package_points_at_the_users_line(fake_hub):
    assert fake_hub.__file__.endswith(os.path.join("site-packages", "fakehub", "__init__.py"))
    where = _located(lambda: fake_hub.fit(warn, "xla_keras: a storm"))  # USER LINE 1
    assert where == (__file__, _line_of("# USER LINE 1")), where  # not fakehub's file


def test_a_warning_through_the_standard_library_points_at_the_users_line(fake_hub):
    def fit():
        queue = sched.scheduler()  # stdlib code that calls back: sched.py's run()
        queue.enter(0, 1, fake_hub.fit, (warn, "xla_keras: a storm"))
        queue.run()  # USER LINE 2

    assert _located(fit) == (__file__, _line_of("# USER LINE 2"))


@pytest.mark.parametrize(
    "filename, library",
    [
        ("/venv/lib/python3.11/site-packages/keras_hub/src/utils/pipeline_model.py", True),
        ("/usr/lib/python3/dist-packages/keras/src/trainers/trainer.py", True),
        (sched.__file__, True),  # the standard library
        (os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "xla_keras", "monitor.py"), True),
        ("<frozen runpy>", True),
        (__file__, False),
        ("/home/me/train.py", False),
        ("<stdin>", False),  # typed at the prompt: the user's
    ],
)
def test_library_files_are_installed_packages_the_stdlib_and_ours(filename, library):
    assert library_file(filename) is library


def test_the_suites_check_rejects_a_warning_located_in_an_installed_package():
    """tests/conftest.py's check of every XlaKerasWarning a test provokes: located at the test's code only."""
    from conftest import _bad_shape

    def at(filename):
        return warnings.WarningMessage("xla_keras: a storm", XlaKerasWarning, filename, 1)

    assert _bad_shape(at("/venv/lib/python3.11/site-packages/keras_hub/src/utils/pipeline_model.py"))
    assert _bad_shape(at("/usr/lib/python3/dist-packages/fakehub/__init__.py"))
    assert _bad_shape(at(sched.__file__)) and _bad_shape(at("<frozen runpy>"))
    assert not _bad_shape(at(__file__))


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("keras_hub") is None, reason="keras_hub is not installed")
def test_a_keras_hub_task_models_storm_warning_points_at_the_users_fit_line(tmp_path):
    """A real KerasHub BertTextClassifier's fit (tests/message_fits.py keras_hub): its storm warning is
    located where Python's warnings machinery says, at the script's own fit line."""
    out = tmp_path / "hub.json"
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="")
    env["PYTHONPATH"] = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
    proc = forked.run(
        [sys.executable, os.path.join(HERE, "message_fits.py"), "keras_hub", str(out)],
        env=env,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = json.loads(out.read_text())
    assert run["storms"] == 1 and run["warnings"], run
    with open(run["fit"]["file"]) as f:
        assert "model.fit(" in f.read().splitlines()[run["fit"]["line"] - 1]  # the script's own fit line
    for said in run["warnings"]:
        assert (said["file"], said["line"]) == (run["fit"]["file"], run["fit"]["line"]), said
