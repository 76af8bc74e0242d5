"""A module's independent runs (subprocess fits, CLI calls), each started at the first test that reads
it and shared by every test after: ``runs[name]`` runs the job once (a fresh subprocess per ground-truth
scenario) and returns its result, or raises its error again for each test that reads it.

pytest-xdist spreads the tests over the cores (``-n 2 --dist loadgroup``); a module that reads runs
marks its tests ``xdist_group`` so that they all go to one worker and each run happens once.
"""

from pathlib import Path
from typing import Any, Callable, Dict

Jobs = Dict[str, Callable[[], Any]]


class Runs:
    """name -> the run's result, run on first read."""

    def __init__(self, jobs: Callable[[Path], Jobs], tmp_path_factory: Any, name: str):
        self.root: Path = tmp_path_factory.mktemp(name.replace("::", "-"))  # the runs write here
        self._jobs = jobs(self.root)
        self._done: Dict[str, tuple] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._done:
            try:
                self._done[name] = (True, self._jobs[name]())
            except Exception as error:  # noqa: BLE001 - each reading test reports the run's own error
                self._done[name] = (False, error)
        ok, value = self._done[name]
        if not ok:
            raise value
        return value

    def __call__(self, name: str) -> Any:
        return self[name]
