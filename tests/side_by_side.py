"""Independent runs (subprocess fits, CLI calls) on two lanes shared by the whole session: the
machine's two cores.

A *family* is a module's set of independent runs that its tests read by name (the ground-truth
scenarios, the doctor's processes, the benchmarks' ``--quick`` runs, ...). Each module registers
its family's jobs with ``@family`` and its fixture returns ``start(...)``: the runs, read lazily,
each test waiting for the one it checks and failing with that run's own error.

tests/conftest.py starts every family the selected tests need when the session starts, longest
first, so that the lanes stay busy across families while the quick tests run in the main process
(those tests time nothing); then the families' tests; then the tests that fit in process, after
``drain()`` (a fit beside the lanes' threads slowed about 70-fold, measured): half of them in a second
pytest process beside this one (tests/second_process.py), the ``timed`` ones last, with nothing
beside. A run that times something against the machine (not one measure against another within the
same run) does not belong in a family: it calls ``drain()`` first and runs alone.
"""

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

LANES = 2

Jobs = Dict[str, Callable[[], Any]]


class Family:
    def __init__(self, key: str, jobs: Callable[[Path], Jobs], seconds: float):
        self.key = key  # "test_module::fixture", as tests/conftest.py names fixtures
        self.jobs = jobs
        self.seconds = seconds  # a rough wall time on 2 cores: the longest start first


FAMILIES: Dict[str, Family] = {}
_lock = threading.Lock()
_pool: Optional[ThreadPoolExecutor] = None
_submitted: List[Future] = []
_started: Dict[str, "Runs"] = {}


class Runs:
    """name -> the run's result, waiting for it; reading a run that raised raises its error."""

    def __init__(self, futures: Dict[str, Future], root: Optional[Path] = None):
        self._futures = futures
        self.root = root  # where the family's runs write (start() gives each family its own)

    def __getitem__(self, name: str) -> Any:
        return self._futures[name].result()

    def __call__(self, name: str) -> Any:
        return self[name]


TIMES: List[Tuple[float, str]] = []  # (seconds, "family: run") of every finished run, for the summary


def _timed(label: str, job: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> Any:
        began = time.monotonic()
        try:
            return job()
        finally:
            TIMES.append((time.monotonic() - began, label))

    return run


def side_by_side(jobs: Jobs, root: Optional[Path] = None, label: str = "") -> Runs:
    """Queue every job on the shared lanes, in the order given (put the slowest first)."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=LANES, thread_name_prefix="lane")
        futures = {name: _pool.submit(_timed(f"{label}: {name}", job)) for name, job in jobs.items()}
        _submitted.extend(futures.values())
    return Runs(futures, root)


def family(key: str, seconds: float) -> Callable[[Callable[[Path], Jobs]], Callable[[Path], Jobs]]:
    """Register a module's family of runs: ``jobs(root)`` -> {name: callable}."""

    def register(jobs: Callable[[Path], Jobs]) -> Callable[[Path], Jobs]:
        FAMILIES[key] = Family(key, jobs, seconds)
        return jobs

    return register


def start(key: str, tmp_path_factory) -> Runs:
    """The family's runs, queued on first call (the session's start, or its first test)."""
    with _lock:
        started = _started.get(key)
    if started is None:
        root = tmp_path_factory.mktemp(key.replace("::", "-"))
        started = _started[key] = side_by_side(FAMILIES[key].jobs(root), root, key)
    return started


def drain() -> None:
    """Wait until no run is in flight: what follows has the machine to itself."""
    while True:
        with _lock:
            pending = [f for f in _submitted if not f.done()]
            _submitted[:] = pending
        if not pending:
            return
        for future in pending:
            future.exception()  # waits; the error is the reading test's to report
