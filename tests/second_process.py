"""The session's last part on both cores: half of the tests that fit in this process run in a second
pytest process, beside the other half here.

Once the lanes drain (tests/side_by_side.py), what is left is the tests that fit in process: about
180 s of one core while the other idled (measured). The modules in ``CHILD_MODULES`` run in a child
pytest, started when that part begins; the others run here meanwhile. The child writes each test's
reports as it goes (pytest's own ``pytest_report_to_serializable``, as pytest-xdist does) and this
process replays them test by test, in order, so the terminal, ``--durations`` and the exit status
read as one session. The child's own output is kept in a file the summary names.

Neither half reads step times against each other: tests marked ``timed`` (their compile counts come
from step times, or their assertions compare them) run after both, with the machine to themselves.
The child's fits share no interpreter with this one (its output goes to a file, not a pipe that a
thread here would drain), so neither half's garbage collector stalls the other's GIL.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest

HERE = Path(__file__).resolve().parent

# Measured alone (seconds, 2026-12-03): test_inputs_lifecycle 40, test_tab_browser 28,
# test_docs_site 7, test_jax_monitor 3, test_compare 3, test_jax_parts 3, test_data 3, test_docstrings
# 3, test_load 2, test_internals 1 go to the child (~95 s, 97 s as CI ran it before the last four
# moved); here stay test_tensorboard 32, test_storm_fits 22, test_monitor 20, test_faults 17 (~90 s,
# 122 s in CI with the collections after each fit).
CHILD_MODULES = {
    "test_inputs_lifecycle",
    "test_tab_browser",
    "test_docs_site",
    "test_compare",
    "test_jax_parts",
    "test_data",
    "test_jax_monitor",
    "test_docstrings",
    "test_load",
    "test_internals",
}

CHILD = "XLA_KERAS_TEST_CHILD"  # set in the child: where it writes its reports
SPLIT = "XLA_KERAS_TEST_SPLIT"  # "off": every in-process fit here, one after another
# Seconds for the whole child: below pytest-timeout's 600 s, whose alarm also covers the replayed
# test that waits for it, so that the child is stopped (and says so) before that alarm fires.
TIMEOUT = 540


def enabled() -> bool:
    return os.environ.get(SPLIT, "on") != "off" and CHILD not in os.environ


class Child:
    """The second pytest process: started once, waited for once, its reports by node id."""

    def __init__(self, config, nodeids: List[str], root: Path):
        self.config = config
        self.nodeids = nodeids
        self.root = root
        self.process: Optional[subprocess.Popen] = None
        self.reports: Dict[str, list] = {}
        self.bad_messages: List[str] = []
        self.seconds: Optional[float] = None
        self.failure = ""  # why a test has no report (the child crashed, or timed out)

    @property
    def log(self) -> Path:
        return self.root / "second_process.log"

    def start(self) -> None:
        if self.process is not None:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        args = self.root / "nodeids.txt"
        args.write_text("\n".join(self.nodeids) + "\n")
        env = dict(os.environ, **{CHILD: str(self.root / "reports.jsonl"), "XLA_KERAS_TEST_LANES": "off"})
        self._began = time.monotonic()
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"@{args}"],
                cwd=HERE.parent,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def wait(self) -> None:
        """Until the child has ended (or is stopped at TIMEOUT); then its reports are read."""
        if self.process is None or self.seconds is not None:
            return
        try:
            code = self.process.wait(timeout=max(1.0, TIMEOUT - (time.monotonic() - self._began)))
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
            self.failure = f"the second pytest process was stopped after {TIMEOUT} s"
        self.seconds = time.monotonic() - self._began
        self._read()
        if not self.failure and code not in (0, 1):  # 1: some test failed, which its report says
            self.failure = f"the second pytest process exited with {code}"

    def _read(self) -> None:
        path = self.root / "reports.jsonl"
        if not path.exists():
            return
        for line in path.read_text(errors="replace").splitlines():
            try:
                data = json.loads(line)
            except json.JSONDecodeError:  # the child was stopped while writing its last report
                self.failure = self.failure or "the second pytest process stopped while writing a report"
                break
            if "bad_messages" in data:
                self.bad_messages.extend(data["bad_messages"])
                continue
            report = self.config.hook.pytest_report_from_serializable(config=self.config, data=data)
            if isinstance(report.longrepr, list):  # a skip's (path, line, reason), a list in JSON
                report.longrepr = tuple(report.longrepr)
            self.reports.setdefault(report.nodeid, []).append(report)

    def replay(self, item) -> None:
        """Log ``item``'s reports as if it had run here; a test without one failed, saying why."""
        self.wait()
        reports = list(self.reports.get(item.nodeid, []))
        if not any(report.when == "teardown" for report in reports):  # never run, or cut off mid-test
            tail = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
            why = self.failure or "the second pytest process did not finish it"
            reports.append(pytest.TestReport(item.nodeid, item.location, {}, "failed", f"{why}\n{tail}", "call"))
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        for report in reports:
            item.ihook.pytest_runtest_logreport(report=report)
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


# ------------------------------------------------------------------ the child's side


def write_report(config, report) -> None:
    """In the child: append one report, as pytest serializes it, to the file the parent reads."""
    data = config.hook.pytest_report_to_serializable(config=config, report=report)
    with open(os.environ[CHILD], "a") as f:
        f.write(json.dumps(data) + "\n")


def write_bad_messages(messages: List[str]) -> None:
    with open(os.environ[CHILD], "a") as f:
        f.write(json.dumps({"bad_messages": messages}) + "\n")


def in_child() -> bool:
    return CHILD in os.environ


def split(alone: list, module_of) -> tuple:
    """(here, there): the tests that fit in process, by module; no split when either half is empty."""
    there = [item for item in alone if module_of(item) in CHILD_MODULES]
    here = [item for item in alone if module_of(item) not in CHILD_MODULES]
    if not enabled() or not here or not there:
        return alone, []
    return here, there
