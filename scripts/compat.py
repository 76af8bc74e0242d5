"""The compatibility tier: xla_keras in the environments users already have.

For each tier, a fresh venv on the tier's Python gets the tier's TensorFlow (and the Keras pip pairs
with it, as a user's repo would have), then:

1. install check: `pip install --dry-run` of this repository must add xla_keras and change nothing
   else; the real install must leave every installed version as it was and `pip check` clean;
   `import tensorflow` must print no protobuf error; the Profile-tab line `xla-keras doctor` prints
   for that environment must change no installed version either (and resolve in time);
2. tests (tiers that have them): the tier's Keras is installed (the oldest one we support), then the
   ground-truth scenarios (XLA's dump, TensorFlow's own compile-time lines), tests/test_internals.py
   (every private API we touch), tests/test_compat.py (Keras 3.6, tf_keras, `python -m`) and
   tests/test_quiet.py (a monitored fit prints no more of TensorFlow's lines than a bare one).

The JAX tier gets JAX pinned at our floor instead, and no TensorFlow: `pip install .[jax]` must change
nothing pinned and bring no TensorFlow, then tests/test_jax_parts.py and the JAX ground truth run
there (XLA's dump, JAX's own compile-time lines).

    python scripts/compat.py                 # every tier
    python scripts/compat.py --tier oldest   # one (repeatable)

A tier's venv with only its pins installed (step 1's starting point) is cached between runs while
those pins are unchanged, verified package by package before each use and copied, so that no run
installs into it (scripts/venv_cache.py; `XLA_KERAS_VENV_CACHE=off` builds every venv fresh). The
install check itself, the tier's test dependencies and the tests run on every run.

Interpreters come from PATH (python3.10, ...) or pyenv; a missing one fails the run, naming it.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import source_tree  # scripts/ is on sys.path: this script's own directory
import venv_cache

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The XLA tab's routes too: TensorBoard 2.16-2.20 serve them through the same data provider API.
TIER_TESTS = [
    "tests/test_ground_truth.py",
    "tests/test_internals.py",
    "tests/test_compat.py",
    "tests/test_quiet.py",
    "tests/test_tab_plugin.py",
    "tests/test_cost_ground_truth.py",
    "tests/test_unsupported_ops.py",
    "tests/test_coverage.py",
]
# Keras's JAX backend, in a venv without TensorFlow (tf.data scenarios skip themselves there).
JAX_TIER_TESTS = [
    "tests/test_jax_parts.py",
    "tests/test_jax_ground_truth.py",
    "tests/test_data.py",
    "tests/test_lengths.py",
    "tests/test_cost_ground_truth.py",
    "tests/test_unsupported_ops.py",
]


# A tier's tests run on pytest-xdist, two workers, the shared scenario runs grouped as in the main suite
# (``--dist loadgroup``); tiers take turns (``Turns``), so two workers are all that share the 2 cores.
TIER_PYTEST = ["pytest>=8", "pytest-timeout>=2.3", "pytest-xdist>=3.5"]


class Turns:
    """Tiers install side by side (downloads, unpacking), but their tests run alone: one tier at a
    time, and while no tier is installing. The ground truth compares compile seconds with
    TensorFlow's own lines: two tiers' fits competing for 2 cores stretched TensorFlow 2.16's
    first-compile op span by 110 ms, and a fourth tier's install beside the oldest tier's tests by
    7 ms past its bound (both measured, failures).

    ``--tests-after FILE`` (scripts/test.sh): the installs start at once, beside the main suite, and
    the tests wait until FILE exists (written when the main suite and the timed tests are done); once
    the last install has ended, ``FILE.installed`` is written, for the timed tests to wait on."""

    def __init__(self):
        self._changed = threading.Condition()
        self._installs = 0
        self._testing = False
        self.tests_after: Optional[str] = None
        self._installing_tiers: set = set()  # tiers not yet past their install phase

    def expect(self, tiers: List[str]) -> None:
        self._installing_tiers = set(tiers)

    def installed(self, tier: str) -> None:
        """``tier`` is past its install phase (done, or failed): when it is the last one, the machine
        is the tests' (``FILE.installed``)."""
        with self._changed:
            if tier not in self._installing_tiers:
                return
            self._installing_tiers.discard(tier)
            if self._installing_tiers or not self.tests_after:
                return
        with open(self.tests_after + ".installed", "w"):
            pass

    def _wait_for_go(self) -> None:
        while self.tests_after and not os.path.exists(self.tests_after):
            time.sleep(1)

    @contextlib.contextmanager
    def installing(self, tier: str):
        with self._changed:
            self._changed.wait_for(lambda: not self._testing)
            self._installs += 1
        try:
            yield
        finally:
            with self._changed:
                self._installs -= 1
                self._changed.notify_all()
            self.installed(tier)

    @contextlib.contextmanager
    def testing(self):
        self._wait_for_go()
        with self._changed:
            self._changed.wait_for(lambda: not self._testing and self._installs == 0)
            self._testing = True
        try:
            yield
        finally:
            with self._changed:
                self._testing = False
                self._changed.notify_all()


TURNS = Turns()
PIP_ENV = {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_ROOT_USER_ACTION": "ignore", "PIP_NO_INPUT": "1"}


@dataclass
class Tier:
    name: str
    python: str  # "3.10"
    tensorflow: str  # the user's pin
    keras: Optional[str] = None  # the Keras the tests run with (None: what pip paired with TensorFlow)
    tests: bool = True
    jax: Optional[str] = None  # a JAX tier: this JAX pinned, no TensorFlow (``tensorflow`` unused)
    results: Dict[str, str] = field(default_factory=dict)
    seconds: Dict[str, float] = field(default_factory=dict)  # each step's wall time, for the log

    @contextlib.contextmanager
    def timed(self, step: str):
        start = time.monotonic()
        try:
            yield
        finally:
            self.seconds[step] = time.monotonic() - start


TIERS = [
    # The oldest pair we support: TensorFlow 2.16 with the first Keras that has the list-of-batches
    # branch (3.7), on the oldest Python.
    Tier("oldest", "3.10", "2.16.2", keras="3.7.0"),
    # A middle pair, with the Keras pip pairs with it (3.15 on Python 3.12).
    Tier("middle", "3.12", "2.18.1"),
    # Install check only: a third pinned environment (the newest Python TensorFlow ships for).
    Tier("install-2.20", "3.13", "2.20.0", tests=False),
    # Keras's JAX backend at its floor: JAX 0.4.36 (its compile events name no function: the monitor
    # counts the step's executables from its jit cache), the Keras pip pairs on Python 3.10, no TensorFlow.
    Tier("jax-oldest", "3.10", "", jax="0.4.36"),
]


class Failure(RuntimeError):
    pass


def find_python(version: str) -> str:
    """A working python<version>, from pyenv or PATH; fail loudly naming what is missing."""
    candidates = []
    roots = [os.environ.get("PYENV_ROOT", ""), os.path.expanduser("~/.pyenv")]
    for root in filter(None, roots):
        candidates += sorted(
            glob.glob(os.path.join(root, "versions", f"{version}.*", "bin", f"python{version}")), reverse=True
        )
    on_path = shutil.which(f"python{version}")
    candidates += [on_path] if on_path else []
    for candidate in candidates:  # a pyenv shim on PATH may exist and still not run
        probe = subprocess.run(
            [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], capture_output=True, text=True
        )
        if probe.returncode == 0 and probe.stdout.strip() == version:
            return candidate
    raise Failure(
        f"the compatibility tier needs Python {version}, and no working python{version} was found on "
        f"PATH or among pyenv's versions ({', '.join(filter(None, roots))}). Install it (e.g. "
        f"`pyenv install {version}`) and run again: no registry ships interpreters, so CI cannot fetch "
        "it itself"
    )


def run(cmd: List[str], *, timeout: float = 1800, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    env = dict(os.environ, **PIP_ENV, **kwargs.pop("env", {}))
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, **kwargs)
    if check and proc.returncode != 0:
        raise Failure(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


installed = venv_cache.packages  # every distribution in a venv, name -> version


def dry_run(python: str, requirements: List[str], report: str, timeout: float = 600) -> List[tuple]:
    """What `pip install --dry-run` would install: [(name, version)]."""
    run([python, "-m", "pip", "install", "--dry-run", "--quiet", "--report", report, *requirements], timeout=timeout)
    with open(report) as f:
        return [
            (i["metadata"]["name"].lower().replace("_", "-"), i["metadata"]["version"]) for i in json.load(f)["install"]
        ]


def source_copy(work: str) -> str:
    """This repository's files in the tier's own directory: `pip install .` builds in the source
    tree, and tiers installing from one tree at once failed on each other's files."""
    return source_tree.copy_of_checkout(os.path.join(work, "source"))


def jax_install_check(tier: Tier, python: str, work: str) -> None:
    """A JAX project's venv: installing xla_keras changes nothing pinned, and brings no TensorFlow."""
    before = installed(python)
    source = source_copy(work)
    would = dry_run(python, [f"{source}[jax]"], os.path.join(work, "dry-run.json"))
    changed = [(name, before[name], v) for name, v in would if name in before and before[name] != v]
    added = sorted(name for name, _ in would if name not in before)
    tier.results["pip install .[jax] (dry run)"] = f"adds {', '.join(added)}; changes {len(changed)}"
    if changed or {"tensorflow", "tensorflow-cpu"} & set(added):
        raise Failure(
            f"installing xla_keras[jax] would change {changed} / add {added} in a venv pinned to jax=={tier.jax}"
        )
    run([python, "-m", "pip", "install", "--quiet", f"{source}[jax]"])
    check = run([python, "-m", "pip", "check"], check=False)
    tier.results["pip check"] = "clean" if check.returncode == 0 else check.stdout.strip()
    if check.returncode != 0:
        raise Failure(f"pip check after installing xla_keras[jax]:\n{check.stdout}")
    if "tensorflow" in installed(python):
        raise Failure("xla_keras[jax] installed TensorFlow")


def install_check(tier: Tier, python: str, work: str) -> None:
    before = installed(python)
    source = source_copy(work)
    would = dry_run(python, [source], os.path.join(work, "dry-run.json"))
    changed = [(name, before[name], v) for name, v in would if name in before]
    added = sorted(name for name, _ in would if name not in before)
    tier.results["pip install . (dry run)"] = f"adds {', '.join(added)}; changes {len(changed)}"
    if changed:
        raise Failure(
            f"installing xla_keras would change {changed} in an environment pinned to tensorflow=={tier.tensorflow}"
        )
    run([python, "-m", "pip", "install", "--quiet", source])
    after = installed(python)
    moved = {k: (before[k], after.get(k)) for k in before if after.get(k) != before[k]}
    if moved or sorted(set(after) - set(before)) != added:
        raise Failure(f"installing xla_keras changed {moved} and added {sorted(set(after) - set(before))}")
    check = run([python, "-m", "pip", "check"], check=False)
    tier.results["pip check"] = "clean" if check.returncode == 0 else check.stdout.strip()
    if check.returncode != 0:
        raise Failure(f"pip check after installing xla_keras:\n{check.stdout}")
    imported = run([python, "-c", "import tensorflow"], check=False)
    if imported.returncode != 0 or "protobuf" in imported.stderr.lower() or "GetPrototype" in imported.stderr:
        raise Failure(f"import tensorflow after installing xla_keras:\n{imported.stderr[-2000:]}")
    tier.results["import tensorflow"] = "no protobuf error"
    line = run(
        [
            python,
            "-c",
            "from xla_keras.core.versions import profile_tab_install; print(profile_tab_install())",
        ],
        cwd=work,
    ).stdout.strip()
    requirements = line.split()[2:]  # after "pip install"
    start = time.monotonic()
    # Python 3.10 + xprof: pip backtracks through fsspec/aiohttp releases for minutes (measured up to ~10).
    would = dry_run(python, [r.strip('"') for r in requirements], os.path.join(work, "profile.json"), timeout=1800)
    moved = [(name, before.get(name), v) for name, v in would if name in before and before[name] != v]
    tier.results["Profile tab line"] = (
        f"`{line}`: +{len(would)} packages, changes {len(moved)}, {time.monotonic() - start:.0f} s to resolve"
    )
    if moved:
        raise Failure(f"the Profile-tab line doctor prints ({line}) would change {moved}")


def tier_tests(vpy: str, files: List[str], env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    """A tier's tests as the main suite runs them: on two workers, then the timed tests alone (pytest's
    exit code 5, no test selected, is no failure). One result, whose last line sums up both runs."""
    pytest = [vpy, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    runs = [
        run([*pytest, *options, *files], cwd=ROOT, check=False, timeout=3600, env=env or {})
        for options in (["-n", "2", "--dist", "loadgroup", "-m", "not timed"], ["-m", "timed"])
    ]
    failed = next((p.returncode for p in runs if p.returncode not in (0, 5)), 0)
    last = [(p.stdout.strip().splitlines() or ["(no output)"])[-1] for p in runs]
    return subprocess.CompletedProcess(
        runs[0].args,
        failed,
        "".join(p.stdout for p in runs) + f"\n{last[0]}; timed alone: {last[1]}",
        "".join(p.stderr for p in runs),
    )


def run_tier(tier: Tier, work_root: str) -> float:
    start = time.monotonic()
    python = find_python(tier.python)
    work = os.path.join(work_root, tier.name)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    venv = os.path.join(work, "venv")
    vpy = os.path.join(venv, "bin", "python")
    if tier.jax:
        return run_jax_tier(tier, python, vpy, work, start)
    with TURNS.installing(tier.name):
        pins = [f"tensorflow=={tier.tensorflow}"]
        with tier.timed("venv"):
            tier.results["venv"] = venv_cache.venv_with(
                f"compat-{tier.name}",
                python,
                pins,
                venv,
                lambda vpy: run([vpy, "-m", "pip", "install", "--quiet", *pins]),
            )
        paired = installed(vpy)
        tier.results["environment"] = (
            f"Python {tier.python}, tensorflow {paired['tensorflow']}, keras "
            f"{paired['keras']}, protobuf {paired['protobuf']}"
        )
        with tier.timed("install check"):
            install_check(tier, vpy, work)
        if tier.tests:
            extra = [f"keras=={tier.keras}"] if tier.keras and paired["keras"] != tier.keras else []
            with tier.timed("test deps"):
                run([vpy, "-m", "pip", "install", "--quiet", *TIER_PYTEST, *extra])
    if tier.tests:
        with TURNS.testing(), tier.timed("tests"):
            tests = tier_tests(vpy, TIER_TESTS)
        summary = (tests.stdout.strip().splitlines() or ["(no output)"])[-1]
        tier.results["tests"] = f"keras {installed(vpy)['keras']}: {summary}"
        if tests.returncode != 0:
            raise Failure(f"tier {tier.name} tests failed:\n{tests.stdout[-6000:]}\n{tests.stderr[-2000:]}")
    return time.monotonic() - start


def run_jax_tier(tier: Tier, python: str, vpy: str, work: str, start: float) -> float:
    keras = [f"keras=={tier.keras}"] if tier.keras else ["keras"]
    with TURNS.installing(tier.name):
        pins = [f"jax[cpu]=={tier.jax}", f"jaxlib=={tier.jax}", *keras]
        with tier.timed("venv"):
            tier.results["venv"] = venv_cache.venv_with(
                f"compat-{tier.name}",
                python,
                pins,
                os.path.dirname(os.path.dirname(vpy)),
                lambda vpy: run([vpy, "-m", "pip", "install", "--quiet", *pins]),
            )
        paired = installed(vpy)
        tier.results["environment"] = (
            f"Python {tier.python}, jax {paired['jax']}, keras {paired['keras']}, no tensorflow"
        )
        with tier.timed("install check"):
            jax_install_check(tier, vpy, work)
        with tier.timed("test deps"):
            run([vpy, "-m", "pip", "install", "--quiet", *TIER_PYTEST, "hypothesis>=6"])
    env = {"KERAS_BACKEND": "jax"}
    with TURNS.testing(), tier.timed("tests"):
        tests = tier_tests(vpy, JAX_TIER_TESTS, env)
    summary = (tests.stdout.strip().splitlines() or ["(no output)"])[-1]
    tier.results["tests"] = f"jax {paired['jax']}, keras {paired['keras']}: {summary}"
    if tests.returncode != 0:
        raise Failure(f"tier {tier.name} tests failed:\n{tests.stdout[-6000:]}\n{tests.stderr[-2000:]}")
    return time.monotonic() - start


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--tier", action="append", choices=[t.name for t in TIERS], help="run only this tier (repeatable); default: all"
    )
    parser.add_argument("--work-dir", default=None, help="where the venvs go (default: a temporary directory)")
    parser.add_argument("--jobs", type=int, default=None, help="tiers run side by side (default: all)")
    parser.add_argument(
        "--tests-after",
        metavar="FILE",
        default=None,
        help="install now, run the tests once FILE exists; write FILE.installed when every install "
        "has ended (scripts/test.sh: the installs overlap the main suite)",
    )
    parser.add_argument(
        "--pair",
        nargs="+",
        metavar=("PYTHON TENSORFLOW", "KERAS"),
        action="append",
        help="an extra tier: Python, TensorFlow and optionally Keras versions, e.g. "
        "--pair 3.11 2.17.1 (used to fill the README's matrix)",
    )
    args = parser.parse_args(argv)
    tiers = [t for t in TIERS if not args.tier and not args.pair or args.tier and t.name in args.tier]
    for pair in args.pair or []:
        if len(pair) not in (2, 3):
            parser.error("--pair takes PYTHON TENSORFLOW [KERAS]")
        tiers.append(
            Tier(
                f"py{pair[0]}-tf{pair[1]}" + (f"-keras{pair[2]}" if len(pair) == 3 else ""),
                pair[0],
                pair[1],
                keras=pair[2] if len(pair) == 3 else None,
            )
        )
    TURNS.tests_after = args.tests_after
    TURNS.expect([t.name for t in tiers])
    jobs = max(1, min(args.jobs or len(tiers), len(tiers)))
    work_root = args.work_dir or tempfile.mkdtemp(prefix="xla_keras_compat_")
    failed = []
    printing = threading.Lock()

    def one(tier: Tier) -> None:
        print(f"   started tier {tier.name} ({time.strftime('%H:%M:%S')})", flush=True)
        try:
            seconds = run_tier(tier, work_root)
            steps = ", ".join(f"{step} {took:.0f} s" for step, took in tier.seconds.items())
            tier.results["time"] = f"{seconds:.0f} s ({steps})"
        except (Failure, subprocess.TimeoutExpired) as error:
            failed.append(tier.name)
            tier.results["FAILED"] = str(error)
        finally:
            TURNS.installed(tier.name)  # a tier that failed before installing holds no one up
        with printing:  # each tier's block as soon as it is done, whole
            pin = f"jax=={tier.jax}" if tier.jax else f"tensorflow=={tier.tensorflow}"
            print(f"== tier {tier.name}: Python {tier.python}, {pin}", flush=True)
            for key, value in tier.results.items():
                print(f"   {key:24s} {value}", flush=True)

    # Tiers are independent venvs: install them side by side (most of a tier is pip downloading and
    # installing TensorFlow); their tests run alone (TURNS).
    start = time.monotonic()
    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(one, tiers))
    waited = " (its tests waited for --tests-after)" if args.tests_after else ""
    print(f"compatibility tier: {time.monotonic() - start:.0f} s for {len(tiers)} tier(s), {jobs} at a time{waited}")
    if not args.work_dir:
        shutil.rmtree(work_root, ignore_errors=True)
    if failed:
        print(f"compatibility tier FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    print("compatibility tier passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
