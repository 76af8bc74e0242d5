"""A monitored fit prints no more of TensorFlow's lines than a bare fit, and each of ours once.

Both fits run in fresh processes at TensorFlow's most talkative level (TF_CPP_MIN_LOG_LEVEL=0,
device_compiler=1), on a storm workload: the monitor probes every new shape, opens a profiler trace
window and warns about two storms. Ground truth is the bare fit's own stderr.
"""

import collections
import os
import re
import subprocess
import sys

import pytest
from runs import Runs

pytestmark = [pytest.mark.scenario, pytest.mark.xdist_group("test_quiet")]

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _normalise(line):
    """A TensorFlow line without what changes from run to run (time, pid, addresses, numbers)."""
    line = re.sub(r"^\d{4}-\d\d-\d\d [\d:.]+: ", "", line)
    line = re.sub(r"^([IWEF])\d{4} [\d:.]+\s+\d+ ", r"\1 ", line)
    line = re.sub(r"0x[0-9a-f]+|\d+(\.\d+)?", "N", line).strip()
    # a duration's unit follows its size: one compile printed "N ms" in one fit, "N s" in the other
    return re.sub(r"\bN ?(ns|us|µs|ms|s|min|h)\b", "N T", line)


MODES = ["bare", "monitored", "default", "fastest"]


def _fits(root):
    env = dict(
        os.environ,
        TF_CPP_MIN_LOG_LEVEL="0",
        TF_CPP_VMODULE="device_compiler=1",
        CUDA_VISIBLE_DEVICES="",
        PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    env.pop("TF_XLA_FLAGS", None)

    def run(mode):
        proc = subprocess.run(
            [sys.executable, os.path.join(HERE, "quiet_fit.py"), mode, str(root / mode)],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0 and "FIT_DONE" in proc.stderr, proc.stderr[-3000:]
        return proc.stderr

    return {mode: (lambda mode=mode: run(mode)) for mode in MODES}


@pytest.fixture(scope="module")
def stderr_of(tmp_path_factory):
    """Each fit's stderr by mode: bare, monitored, default (Keras's jit), fastest."""
    return Runs(_fits, tmp_path_factory, "test_quiet::stderr_of")


def _warnings(stderr):
    """Each XlaKerasWarning as Python printed it: (its `file:line` location, its message lines);
    the message runs from the header to the warning's source line (indented, as Python prints it)."""
    lines, found = stderr.splitlines(), []
    for i, line in enumerate(lines):
        if ": XlaKerasWarning: " in line:
            where, _, first = line.partition(": XlaKerasWarning: ")
            end = next((j for j in range(i + 1, min(i + 8, len(lines))) if lines[j].startswith("  ")), i + 1)
            found.append((i, end, where, [first, *lines[i + 1 : end]]))
    return found


def _ours(stderr):
    """The monitor's own lines: its warnings (message and source line) and `xla_keras:` lines."""
    lines, ours = stderr.splitlines(), set()
    for i, end, _, _ in _warnings(stderr):
        ours.update(range(i, end + 1))  # header, message lines, the warning's source line
    ours.update(i for i, line in enumerate(lines) if line.startswith("xla_keras:"))
    return [lines[i] for i in sorted(ours)], [line for i, line in enumerate(lines) if i not in ours]


@pytest.mark.parametrize("monitored, bare", [("monitored", "bare"), ("fastest", "default")])
def test_a_monitored_fit_prints_no_framework_line_a_bare_fit_does_not(stderr_of, monitored, bare):
    """jit='fastest' against a bare fit in Keras's default mode: its trial tries XLA, whose start-up
    lines a bare fit never prints. The compile-time line the test asks TensorFlow for
    (TF_CPP_VMODULE=device_compiler=1) reports the trial's real compile: it stays."""
    _, framework = _ours(stderr_of[monitored])
    if monitored == "fastest":
        assert sum("Compilation of XLA executable time" in line for line in framework) == 1
        framework = [line for line in framework if "Compilation of XLA executable time" not in line]
        assert "Compiled cluster using XLA" not in stderr_of[monitored]
    extra = collections.Counter(_normalise(line) for line in framework) - collections.Counter(
        _normalise(line) for line in stderr_of[bare].splitlines()
    )
    assert not extra, f"lines the monitored fit added: {list(extra.elements())[:10]}"
    if monitored == "monitored":
        assert "Profiler session" not in stderr_of["monitored"]
        assert "Collecting XSpace" not in stderr_of["monitored"]


def test_tensorflow_lines_printed_inside_probed_steps_still_reach_the_user(stderr_of):
    """The probes cover exactly the steps that compile: TensorFlow's compile-time line of each
    of them is printed as in a bare fit (explain and the ground-truth tests read these)."""
    count = [s.count("Compilation of XLA executable time") for s in (stderr_of["bare"], stderr_of["monitored"])]
    assert count[0] > 4 and count[0] == count[1]


def test_each_of_the_monitors_messages_is_said_once(stderr_of):
    ours, _ = _ours(stderr_of["monitored"])
    messages = [line for line in ours if "XlaKerasWarning" in line or line.startswith("xla_keras:")]
    assert [m for m in messages if "Recompilation storm (train)" in m].__len__() == 1
    assert [m for m in messages if "Recompilation storm (test)" in m].__len__() == 1
    assert len(messages) == len(set(messages)), messages


@pytest.mark.parametrize("run", ["monitored", "fastest"])
def test_each_warning_is_at_most_4_lines_of_100_characters_located_at_the_users_fit(stderr_of, run):
    """Python's `file:line: XlaKerasWarning:` header is not counted, but it names the user's script
    (the line that called fit), never a file of ours or of Keras."""
    found = _warnings(stderr_of[run])
    assert found or run == "fastest"
    for _, _, where, message in found:
        assert os.path.basename(where.rsplit(":", 1)[0]) == "quiet_fit.py", where
        assert len(message) <= 4 and max(len(line) for line in message) <= 100, message


def test_only_the_profilers_own_info_lines_are_filtered():
    from xla_keras.backends.tensorflow.quiet import filter_profiler_lines

    dropped = [
        b"2026-12-01 06:01:45.622786: I external/local_tsl/tsl/profiler/lib/profiler_session.cc:68] "
        b"Profiler session collecting data.\n",
        b"I0000 00:00:1796104901.894342   15480 profiler_session.cc:81] Profiler session tear down.\n",
        b"I0000 00:00:1796104901.894342   15480 save_profile.cc:150] Collecting XSpace to repository: /x\n",
    ]
    kept = [
        b"E0000 00:00:1796104901.894342   15480 profiler_session.cc:90] Failed to export\n",
        b"2026-12-01 06:01:45.622786: W external/local_tsl/tsl/profiler/lib/save_profile.cc:68] Cannot write\n",
        b"I0000 00:00:1796104901.894342   15480 device_compiler.h:208] Compiled cluster using XLA!\n",
        b"a user's own line that mentions profiler_session.cc:12] in passing\n",
    ]
    assert filter_profiler_lines(b"".join(dropped + kept)) == b"".join(kept)


def test_overlapping_windows_from_two_threads_leave_stderr_where_it_was():
    import threading
    import time

    from xla_keras.backends.tensorflow.quiet import without_profiler_lines

    before = os.readlink("/proc/self/fd/2") if os.path.exists("/proc/self/fd/2") else None
    threads = [threading.Thread(target=without_profiler_lines, args=(lambda: time.sleep(0.05),)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if before is not None:
        assert os.readlink("/proc/self/fd/2") == before


def test_only_xlas_start_up_lines_are_filtered_in_a_fastest_trial():
    from xla_keras.backends.tensorflow.quiet import XLA_STARTUP_LINE, filter_profiler_lines

    dropped = [
        b"I0000 00:00:1796153684.250277   19534 service.cc:153] XLA service 0x560f24316f90 initialized for "
        b"platform Host (this does not guarantee that XLA will be used). Devices:\n",
        b"I0000 00:00:1796153684.250315   19534 service.cc:161]   StreamExecutor [0]: Host, Default Version\n",
        b"I0000 00:00:1796153684.274994   19534 dump_mlir_util.cc:269] disabling MLIR crash reproducer, set env "
        b"var `MLIR_CRASH_REPRODUCER_DIRECTORY` to enable.\n",
        b"I0000 00:00:1796153685.041251   19534 device_compiler.h:208] Compiled cluster using XLA!  This line "
        b"is logged at most once for the lifetime of the process.\n",
        b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n",
    ]
    kept = [
        b"I0000 00:00:1796153737.844371   19981 device_compiler.h:538] Compilation of XLA executable time: 871 "
        b"ms (870554 us)\n",
        b"W0000 00:00:1796153684.250277   19534 service.cc:153] XLA service could not start\n",
        b"a user's own line\n",
    ]
    assert filter_profiler_lines(b"".join(dropped + kept), XLA_STARTUP_LINE) == b"".join(kept)
