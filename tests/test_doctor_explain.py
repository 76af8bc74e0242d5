"""xla-keras doctor and explain, against real TensorFlow processes."""

import os
import subprocess
import sys

import pytest
from runs import Runs

from xla_keras.tools.explain import explain, render_findings

pytestmark = pytest.mark.xdist_group("scenario_runs")  # the session's scenario runs: read on one worker

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOG_SOURCES = os.path.join(ROOT, "tests", "log_sources.py")


def _env(**extra):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("TF_XLA_FLAGS", None)
    env.pop("XLA_FLAGS", None)
    env.update(extra)
    return env


def _keys(text):
    return [f.pattern.key for f in explain(text.splitlines())]


def _python(*args, **env):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=600, env=_env(**env))


_DEVICES_AFTER_DOCTOR = (
    "import xla_keras, sys\n"
    "from xla_keras.backends.tensorflow import _internals\n"
    "findings = xla_keras.doctor(check_flags=False)\n"
    "assert any(f.topic == 'devices' for f in findings)\n"
    "print(_internals.devices_initialized())\n"
)
_CONFIGURE_THEN_DOCTOR = (
    "import xla_keras\n"
    "xla_keras.configure(cpu_autoclustering=True)\n"
    "from xla_keras.tools.doctor import doctor, exit_code\n"
    "print('EXIT', exit_code(doctor(check_flags=False)))\n"
)


def _late_cache_then_doctor(cache_dir):
    return (
        "import xla_keras, keras, warnings\n"
        "keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])\n"
        "warnings.simplefilter('ignore')\n"
        f"xla_keras.configure(cache_dir={cache_dir!r})\n"
        "print([str(f) for f in xla_keras.doctor(check_flags=False) if 'cache' in f.topic])\n"
    )


def _processes(root):
    """Every TensorFlow process these tests read, each importing TensorFlow afresh with its flags."""
    cache = root / "persistent_cache"
    cache.mkdir()
    (cache / "xla_compile_cache__1__2__XLA_CPU_JIT.pb").write_bytes(b"x" * 2000)
    doctor = ("-m", "xla_keras", "doctor")
    jobs = {
        "unknown flag kills tensorflow": lambda: _python(
            "-c", "import tensorflow as tf; tf.constant(1.0) + 1.0", TF_XLA_FLAGS="--no_such_flag"
        ),
        "log: retrace": lambda: _python(LOG_SOURCES, "retrace"),
        "log: refused": lambda: _python(LOG_SOURCES, "refused"),
        "doctor": lambda: _python(*doctor),
        "doctor: unknown TF_XLA_FLAGS": lambda: _python(*doctor, TF_XLA_FLAGS="--tf_xla_auto_jit=2 --no_such_flag"),
        "doctor: unknown XLA_FLAGS": lambda: _python(*doctor, XLA_FLAGS="--xla_no_such_flag=1"),
        "doctor: auto-jit without the CPU flag": lambda: _python(*doctor, TF_XLA_FLAGS="--tf_xla_auto_jit=2"),
        "doctor: valid flags": lambda: _python(
            *doctor, TF_XLA_FLAGS="--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit", TF_CPP_MIN_LOG_LEVEL="2"
        ),
        "doctor: single-gpu auto-jit": lambda: _python(*doctor, TF_XLA_FLAGS="--tf_xla_auto_jit=single-gpu(2)"),
        "doctor: persistent cache": lambda: _python(
            *doctor, TF_XLA_FLAGS=f"--tf_xla_persistent_cache_directory={cache}"
        ),
        "doctor in process": lambda: _python("-c", _DEVICES_AFTER_DOCTOR),
        "configure, then doctor": lambda: _python("-c", _CONFIGURE_THEN_DOCTOR, TF_XLA_FLAGS="--tf_xla_auto_jit=2"),
        "late cache_dir, then doctor": lambda: _python("-c", _late_cache_then_doctor(str(cache / "late"))),
    }
    return jobs


@pytest.fixture(scope="module")
def processes(tmp_path_factory):
    return Runs(_processes, tmp_path_factory, "test_doctor_explain::processes")


# ------------------------------------------------------------------ explain


@pytest.mark.slow
@pytest.mark.scenario
def test_explain_a_real_autoclustering_run(scenario_runs):
    run = scenario_runs("partial_batch-auto-env")  # TF_CPP_VMODULE=device_compiler=1 was on
    findings = {f.pattern.key: f for f in explain(run.stderr.splitlines())}
    assert {"compiled_cluster", "compile_time", "xla_service"} <= set(findings)
    assert findings["compiled_cluster"].count == 1  # TensorFlow logs it once per process
    compile_time = findings["compile_time"]
    assert compile_time.count == len(run.tf_compile_seconds)
    assert compile_time.total_ms == pytest.approx(sum(run.tf_compile_seconds) * 1e3, rel=1e-6)
    assert f"{compile_time.count} compiles" in render_findings(list(findings.values()))


@pytest.mark.slow
def test_explain_an_unknown_tf_xla_flag_that_killed_tensorflow(processes):
    stderr = processes["unknown flag kills tensorflow"].stderr
    findings = explain(stderr.splitlines())
    assert [f.pattern.key for f in findings if f.pattern.key.startswith("unknown")] == ["unknown_tf_xla_flag"]
    assert "--no_such_flag" in findings[[f.pattern.key for f in findings].index("unknown_tf_xla_flag")].examples[0]


@pytest.mark.slow
@pytest.mark.parametrize("kind, key", [("retrace", "retracing"), ("refused", "keras_refused_jit")])
def test_explain_warnings_from_real_runs(processes, kind, key):
    findings = {f.pattern.key: f for f in explain(processes[f"log: {kind}"].stderr.splitlines())}
    assert key in findings
    text = render_findings(list(findings.values()))
    assert f"[{key}]" in text and "fix" in text


@pytest.mark.parametrize(
    "line, key",
    [
        # These two need TensorFlow's verbose logging to appear; written as TensorFlow prints them.
        (
            "I0000 00:00:1 mark_for_compilation_pass.cc:1798] Not using XLA:CPU for cluster because envvar "
            "TF_XLA_FLAGS=--tf_xla_cpu_global_jit was not set.",
            "not_using_xla_cpu",
        ),
        (
            "W0000 device_compilation_profiler.cc:140] Cluster cluster_3 is megamorphic: compiled 11 times",
            "megamorphic",
        ),
    ],
)
def test_explain_lines_that_need_verbose_logging(line, key):
    assert _keys(line) == [key]


@pytest.mark.slow
def test_explain_cli_reads_stdin_and_files(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(
        "noise\nI0000 device_compiler.h:538] Compilation of XLA executable time: 250 ms (x)\n"
        "I0000 device_compiler.h:538] Compilation of XLA executable time: 1.5 s (x)\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "xla_keras", "explain", str(log)],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert result.returncode == 0 and "2 compiles, 1.75 s in all" in result.stdout
    result = subprocess.run(
        [sys.executable, "-m", "xla_keras", "explain", "-"],
        input="nothing here\n",
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert result.returncode == 0 and "No TensorFlow/XLA lines found" in result.stdout
    result = subprocess.run(
        [sys.executable, "-m", "xla_keras", "explain", str(tmp_path / "missing.log")],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert result.returncode == 2 and "cannot read" in result.stderr


# ------------------------------------------------------------------ doctor


@pytest.mark.slow
def test_doctor_on_a_cpu_machine_is_informational_and_exits_0(processes):
    result = processes["doctor"]
    assert result.returncode == 0, result.stdout + result.stderr
    for words in (
        "versions: tensorflow 2.",
        "devices: CPU",
        "resolves to False here",
        "Profile tab",
        "persistent compilation cache",
    ):
        assert words in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    "run, words",
    [
        ("doctor: unknown TF_XLA_FLAGS", "Unknown flag in TF_XLA_FLAGS: --no_such_flag"),
        ("doctor: unknown XLA_FLAGS", "Unknown flag in XLA_FLAGS"),
        ("doctor: auto-jit without the CPU flag", "the CPU global-jit flag is not set"),
    ],
)
def test_doctor_exits_non_zero_for_what_will_not_work(processes, run, words):
    result = processes[run]
    assert result.returncode == 1
    assert "[error]" in result.stdout and words in result.stdout


@pytest.mark.slow
def test_doctor_accepts_valid_flags(processes):
    result = processes["doctor: valid flags"]
    assert result.returncode == 0, result.stdout
    assert "TensorFlow started and compiled with these flags" in result.stdout
    assert "TF_CPP_MIN_LOG_LEVEL=2 hides" in result.stdout
    assert "CPU auto-clustering: can compile clusters" in result.stdout


@pytest.mark.slow
def test_doctor_in_process_does_not_create_devices(processes):
    result = processes["doctor in process"]
    assert result.stdout.strip().splitlines()[-1] == "False", result.stderr[-2000:]


def test_explain_uses_the_exact_microseconds_and_long_units():
    lines = [
        "Compilation of XLA executable time: 1.5 min (90000000 us) (cumulative: 1.5 min)",
        "Compilation of XLA executable time: 456 us (456 us) (cumulative: 1.5 min)",
        "Compilation of XLA executable time: 1.23 s (1234567 us) (cumulative: 1.5 min)",
    ]
    (finding,) = explain(lines)
    assert finding.count == 3 and finding.total_ms == pytest.approx(90000 + 0.456 + 1234.567)


@pytest.mark.slow
def test_doctor_single_gpu_auto_jit_on_cpu_is_informational(processes):
    result = processes["doctor: single-gpu auto-jit"]
    assert result.returncode == 0, result.stdout
    assert "clusters only on a machine with exactly one GPU" in result.stdout


@pytest.mark.slow
def test_doctor_counts_configure_as_the_cpu_flag(processes):
    result = processes["configure, then doctor"]
    assert "EXIT 0" in result.stdout, result.stdout + result.stderr[-2000:]


@pytest.mark.slow
def test_doctor_reports_the_persistent_cache(processes):
    result = processes["doctor: persistent cache"]
    assert result.returncode == 0, result.stdout
    cache = processes.root / "persistent_cache"
    assert f"[ok   ] persistent compilation cache: {cache}: 1 executable(s)" in result.stdout
    result = processes["late cache_dir, then doctor"]
    assert "configured after TensorFlow read its flags" in result.stdout, result.stderr[-2000:]


@pytest.mark.parametrize(
    "tensorflow, protobuf, line",
    [
        ("2.16.2", "4.25.9", 'pip install "tensorboard-plugin-profile==2.16.0"'),
        ("2.17.1", "4.25.9", 'pip install "tensorboard-plugin-profile==2.17.0"'),
        ("2.19.1", "4.21.0", 'pip install "tensorboard-plugin-profile==2.19.0"'),
        ("2.18.1", "5.29.6", 'pip install tensorboard-plugin-profile "tensorflow==2.18.1" "protobuf==5.29.6"'),
        ("2.21.0", "7.36.2", 'pip install tensorboard-plugin-profile "tensorflow==2.21.0" "protobuf==7.36.2"'),
    ],
)
def test_the_profile_tab_line_keeps_the_users_pins(monkeypatch, tensorflow, protobuf, line):
    """scripts/compat.py runs the line for real (pip --dry-run) in pinned venvs: no version changes."""
    from xla_keras.core import versions as profile_tab

    versions = {"tensorflow": tensorflow, "protobuf": protobuf}
    monkeypatch.setattr(profile_tab, "installed_version", lambda name: versions.get(name, "unknown"))
    profile_tab_install = profile_tab.profile_tab_install
    assert profile_tab_install() == line
