"""Packaging proof: what a user gets from the built wheel, away from this source tree.

Builds the sdist and, from it, the wheel (`python -m build`, so a file missing from the sdist fails
here too), installs the wheel into a clean venv outside the repository (a copy of a cached venv holding the
wheel's dependencies, rebuilt whenever its requirement lines change: scripts/venv_cache.py), and there runs
`xla-keras --version`, `python -m xla_keras --version` and the quick-start example, checking that the
package imported is the installed one; and, in a second clean venv, ``xla_keras[jax]``: no TensorFlow
installed, the quick start under KERAS_BACKEND=jax, its XLA tab.

    python scripts/package_check.py [--work-dir DIR]
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from typing import List

import source_tree  # scripts/ is on sys.path: this script's own directory
import venv_cache

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_ROOT_USER_ACTION="ignore", CUDA_VISIBLE_DEVICES="")
ENV.pop("PYTHONPATH", None)


def run(cmd, **kwargs):
    proc = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=1800, **kwargs)
    if proc.returncode != 0:
        sys.exit(
            f"package check: {' '.join(map(str, cmd))} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n"
            f"{proc.stderr[-3000:]}"
        )
    return proc.stdout


def wheel_requirements(wheel: str) -> List[str]:
    """The wheel's own Requires-Dist lines (every extra's, with their markers)."""
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(metadata).decode()
    return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Requires-Dist:")]


def clean_venv_with_dependencies(venv: str, wheel: str, extra: str) -> str:
    """A clean venv holding what ``pip install "<wheel>[extra]"`` installs besides xla_keras itself, so
    that installing the wheel next adds the wheel's files alone. Cached (scripts/venv_cache.py) under a
    key of this Python and the wheel's requirement lines: a change to the requirements builds it anew."""

    def install(python: str) -> None:
        run([python, "-m", "pip", "install", "--quiet", f"{wheel}[{extra}]"])
        run([python, "-m", "pip", "uninstall", "--quiet", "--yes", "xla_keras"])

    pins = [f"[{extra}]", *wheel_requirements(wheel)]
    return venv_cache.venv_with(f"package-{extra}", sys.executable, pins, venv, install)


# The XLA tab from the wheel: TensorBoard's entry point loads the plugin, which serves its static files
# and reads the quick start's run through TensorBoard's own data provider.
TAB_CHECK = r"""
import json, sys
from importlib.metadata import entry_points
from tensorboard.backend import application
from tensorboard.backend.event_processing import data_ingester, data_provider, plugin_event_multiplexer
from tensorboard.plugins import base_plugin
from werkzeug.test import Client
logdir = sys.argv[1]
found = [e for e in entry_points(group="tensorboard_plugins") if e.name == "xla_keras"]
assert len(found) == 1, f"tensorboard_plugins entry points: {list(entry_points(group='tensorboard_plugins'))}"
multiplexer = plugin_event_multiplexer.EventMultiplexer(
    size_guidance=data_ingester.DEFAULT_SIZE_GUIDANCE, tensor_size_guidance=data_ingester.DEFAULT_TENSOR_SIZE_GUIDANCE)
multiplexer.AddRunsFromDirectory(logdir)
multiplexer.Reload()
provider = data_provider.MultiplexerDataProvider(multiplexer, logdir)
plugin = found[0].load()(base_plugin.TBContext(logdir=logdir, data_provider=provider, multiplexer=multiplexer))
client = Client(application.TensorBoardWSGI([plugin], data_provider=provider))
listing = json.loads(client.get("/data/plugins_listing").get_data())["xla_keras"]
assert listing["enabled"] and listing["tab_name"] == "XLA", listing
for name in ("index.js", "style.css"):
    response = client.get("/data/plugin/xla_keras/static/" + name)
    assert response.status_code == 200 and len(response.get_data()) > 500, (name, response.status_code)
runs = json.loads(client.get("/data/plugin/xla_keras/runs").get_data())["runs"]
assert [r["run"] for r in runs] == ["."] and runs[0]["message"] is None, runs
view = json.loads(client.get("/data/plugin/xla_keras/report?run=.").get_data())
report = json.load(open(logdir + "/xla_report.json"))
assert len(view["ledger"]) == len(report["compilations"]), (view, report)
print(f"the XLA tab loaded through its entry point and served the run ({len(view['ledger'])} compiles)")
"""


def check_tensorflow_venv(work: str, wheel: str):
    """``pip install "xla_keras[tensorflow]"`` in a clean venv: the CLI, the quick start, the XLA tab."""
    venv = os.path.join(work, "venv")
    python = os.path.join(venv, "bin", "python")
    said = clean_venv_with_dependencies(venv, wheel, "tensorflow")
    run([python, "-m", "pip", "install", "--quiet", f"{wheel}[tensorflow]"])
    outside = os.path.join(work, "elsewhere")  # not the source tree: only the wheel's files can be imported
    os.makedirs(outside, exist_ok=True)
    where = run([python, "-c", "import xla_keras, os; print(os.path.dirname(xla_keras.__file__))"], cwd=outside)
    if not where.strip().startswith(venv):
        sys.exit(f"package check: xla_keras was imported from {where.strip()}, not from the venv")
    from_wheel = run([os.path.join(venv, "bin", "xla-keras"), "--version"], cwd=outside).strip()
    from_module = run([python, "-m", "xla_keras", "--version"], cwd=outside).strip()
    shutil.copy(os.path.join(ROOT, "examples", "quickstart.py"), outside)
    quick = run([python, "quickstart.py", "--log-dir", os.path.join(outside, "logs"), "--epochs", "2"], cwd=outside)
    # verbose=1's end-of-fit summary starts with this line (xla_keras/report/render.py)
    if SUMMARY not in quick or not os.path.isfile(os.path.join(outside, "logs", "xla_report.json")):
        sys.exit(f"package check: the quick start ran but printed no summary or wrote no xla_report.json:\n{quick}")
    tab = run([python, "-c", TAB_CHECK, os.path.join(outside, "logs")], cwd=outside).strip()
    return from_wheel, from_module, f"{tab}; venv {said}"


SUMMARY = "xla_keras: XLA ran (jit='on')"  # the first line of the quick start's end-of-fit summary


# Under Keras's JAX backend, from `pip install "xla_keras[jax]"`: no TensorFlow installed, none imported.
JAX_CHECK = r"""
import importlib.util, json, sys
assert importlib.util.find_spec("tensorflow") is None, "TensorFlow was installed by xla_keras[jax]"
report = json.load(open(sys.argv[1] + "/xla_report.json"))
assert report["backend"] == "jax" and report["jit_active"] is True and report["compilation_count"]["train"] >= 1, report
print(f"xla_keras[jax] installed no TensorFlow; the quick start ran on JAX ({report['versions']['jax']}): "
      f"{report['compilation_count']['train']} train compile(s), XLA active")
"""


def check_jax_venv(work: str, wheel: str) -> str:
    venv = os.path.join(work, "venv_jax")
    python = os.path.join(venv, "bin", "python")
    said = clean_venv_with_dependencies(venv, wheel, "jax")
    run([python, "-m", "pip", "install", "--quiet", f"{wheel}[jax]"])
    outside = os.path.join(work, "elsewhere_jax")
    os.makedirs(outside, exist_ok=True)
    shutil.copy(os.path.join(ROOT, "examples", "quickstart.py"), outside)
    logs = os.path.join(outside, "logs")
    env = dict(ENV, KERAS_BACKEND="jax")
    proc = subprocess.run(
        [
            python,
            "-c",
            "import runpy, sys; sys.argv = ['quickstart.py', '--log-dir', sys.argv[1], "
            "'--epochs', '2']; runpy.run_path('quickstart.py', run_name='__main__'); "
            "assert 'tensorflow' not in sys.modules, 'the monitored fit imported TensorFlow'",
            logs,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=outside,
        timeout=900,
    )
    if proc.returncode != 0 or SUMMARY not in proc.stdout:
        sys.exit(
            f"package check: the quick start under KERAS_BACKEND=jax failed:\n{proc.stdout[-3000:]}\n"
            f"{proc.stderr[-3000:]}"
        )
    line = run([python, "-c", JAX_CHECK, logs], cwd=outside).strip()
    tab = run([python, "-c", TAB_CHECK, logs], cwd=outside).strip()
    return f"{line}; {tab.replace('the XLA tab', 'its XLA tab')}; venv {said}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work-dir", default=None)
    args = parser.parse_args()
    start = time.monotonic()
    work = args.work_dir or tempfile.mkdtemp(prefix="xla_keras_package_")
    dist = os.path.join(work, "dist")
    shutil.rmtree(dist, ignore_errors=True)
    source = os.path.join(work, "source")
    shutil.rmtree(source, ignore_errors=True)
    run([sys.executable, "-m", "build", "--outdir", dist, source_tree.copy_of_checkout(source)])
    wheels, sdists = glob.glob(os.path.join(dist, "*.whl")), glob.glob(os.path.join(dist, "*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        sys.exit(f"package check: expected one wheel and one sdist in {dist}, found {os.listdir(dist)}")
    with ThreadPoolExecutor(2) as pool:  # the two installs overlap (network and unpacking)
        tf_result = pool.submit(check_tensorflow_venv, work, wheels[0])
        jax_result = pool.submit(check_jax_venv, work, wheels[0])
        from_wheel, from_module, tab = tf_result.result()
        jax_line = jax_result.result()
    print(
        f"built {os.path.basename(wheels[0])} and {os.path.basename(sdists[0])}; in a clean venv: "
        f"`xla-keras --version` -> {from_wheel!r}, `python -m xla_keras --version` -> {from_module!r}, the quick "
        f"start printed its summary and wrote xla_report.json; {tab}; {jax_line} "
        f"({time.monotonic() - start:.0f} s)"
    )
    if not args.work_dir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
