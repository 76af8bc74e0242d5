"""Every kind of message the monitor says, from real fits (tests/message_fits.py: a storm, a storm
fallback, a compile-budget advice, jit="fastest", a refusal, a missing Profile tab plugin), as the
user's terminal shows it: each message at most 4 lines of at most 100 characters, the end-of-fit
summary at most 12, each said once."""

import os
import re
import subprocess
import sys

import pytest
from runs import Runs
from test_quiet import _warnings

pytest.importorskip("tensorflow")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
KINDS = ("storm", "fallback", "budget", "fastest", "refusal", "missing_plugin")

pytestmark = [pytest.mark.scenario, pytest.mark.xdist_group("test_messages")]


def _fits(root):
    def run():
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        env.pop("TF_XLA_FLAGS", None)
        proc = subprocess.run(
            [sys.executable, os.path.join(HERE, "message_fits.py"), "all", str(root)],
            env=env,
            capture_output=True,
            text=True,
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
    return Runs(_fits, tmp_path_factory, "test_messages::said")["all"]


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


def test_the_summary_names_the_fix_as_code(said):
    summary = _messages(said["stdout"]["budget"])[-1]
    assert "  fix          : ds = xla_keras.data.apply_fix(ds, monitor.report.advice[0].fix)" in summary
