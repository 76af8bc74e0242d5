#!/usr/bin/env bash
# Line coverage of xla_keras/ by the main suite, subprocesses included: the ground-truth fits run in
# fresh processes (coverage's `patch = subprocess`, pyproject.toml [tool.coverage.run]), the suite on
# pytest-xdist's two workers (pytest-cov combines them), then the timed tests. Not part of CI's run
# (about 1.5x the main suite's time); issue notes quote it before and after a change.
#   bash scripts/coverage.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --quiet "coverage>=7.10" "pytest-cov>=7"
rm -f .coverage .coverage.*
python -m pytest -q -p no:cacheprovider -n 2 --dist loadgroup -m "not timed" --cov=xla_keras --cov-report= "$@"
python -m pytest -q -p no:cacheprovider -m timed --cov=xla_keras --cov-append --cov-report= "$@"
python -m coverage combine --append --quiet || true  # pytest-cov combines already; leftovers from children
python -m coverage report --skip-covered --sort=cover | tail -25
