#!/usr/bin/env bash
# Install what the tests need, then run them all (this is what CI runs, via .ci/run):
#   0. static checks: ruff check, ruff format --check, mypy xla_keras, mkdocs build --strict;
#   1. the main suite on the newest pair (TensorFlow 2.21, Keras 3.15, this Python): pytest-xdist on
#      two workers (-n 2 --dist loadgroup: a module's shared runs on one worker, tests/runs.py), then
#      the tests that read step times against the clock (-m timed) alone, in a second invocation;
#   2. the compatibility tier: fresh venvs pinned to older TensorFlow releases (install check,
#      ground truth, private APIs, older Keras / tf_keras), scripts/compat.py;
#   3. the packaging proof: sdist + wheel, installed in a clean venv, scripts/package_check.py.
# 2's installs and all of 3 run in the background during the main suite (downloads and unpacking
# beside a suite that leaves ~13% of the cores idle); both are over before the timed tests start,
# and 2's tests wait for the timed tests to end: what compares times runs alone.
# `bash scripts/test.sh --main` runs only 0 and 1 (after the install).
# `bash scripts/test.sh --quick` runs only the quick tier: the tests that start no fit
# (`pytest -m "not slow"`, see tests/conftest.py), with no install step: the inner loop (hypothesis
# draws a quarter of its examples there; everywhere else, all of them).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--quick" ]; then
  shift
  XLA_KERAS_TEST_TIER=quick exec python -m pytest -q -m "not slow" -p no:cacheprovider -n 2 --dist loadgroup "$@"
fi

start=$(date +%s)
section_name=""
section_start=$start
# Each section's header names the clock; the next header (or the end) says how long it took.
section_done() {
  if [ -n "$section_name" ]; then
    echo "=== $section_name: $(($(date +%s) - section_start)) s"
    section_name=""
  fi
}
background=()  # the process groups started below: stopped with everything they started on exit
docs_site=""  # the documentation site the static checks build (removed on exit)
finish() {
  section_done
  for group in "${background[@]}"; do kill -- "-$group" 2>/dev/null || true; done
  if [ -n "$docs_site" ]; then rm -rf "$docs_site"; fi
}
trap finish EXIT  # a failing section says how long it ran too
section() {
  section_done
  section_name="$1"
  section_start=$(date +%s)
  echo
  echo "=== $1 ($(date +%H:%M:%S))"
}

section "install"
bash scripts/install_test_deps.sh
full=$([ "${1:-}" != "--main" ] && echo yes || true)
if [ -n "$full" ]; then
  logs=$(mktemp -d)
  tests_after="$logs/compat-tests-may-start"
  set -m  # each background job in its own process group, so that `finish` stops its children too
  python scripts/compat.py --tests-after "$tests_after" > "$logs/compat.log" 2>&1 &
  compat=$!
  python scripts/package_check.py > "$logs/package.log" 2>&1 &
  package=$!
  set +m
  background=("$compat" "$package")
  echo "(compatibility tier installing and packaging proof running in the background: $logs)"
fi
section "static checks"
ruff check .
ruff format --check .
mypy xla_keras
# The documentation site (mkdocs.yml): no broken link or reference; built outside the checkout, once: the
# suite's browser tests read this build (XLA_KERAS_DOCS_SITE) instead of building it again.
docs_site=$(mktemp -d)
NO_MKDOCS_2_WARNING=1 mkdocs build --strict --site-dir "$docs_site"  # not --quiet: it hides the warnings --strict counts
export XLA_KERAS_DOCS_SITE="$docs_site"
section "main suite"
python -m pytest -q -n 2 --dist loadgroup -m "not timed" --durations=15
if [ -n "$full" ]; then
  section "waiting for the background installs and the packaging proof"
  package_status=0
  wait "$package" || package_status=$?
  while [ ! -e "$tests_after.installed" ] && kill -0 "$compat" 2>/dev/null; do sleep 1; done
fi
section "timed tests"
python -m pytest -q -m timed --durations=5
if [ -n "$full" ]; then
  section "packaging"
  cat "$logs/package.log"
  [ "$package_status" = 0 ] || { echo "packaging proof failed (exit $package_status)"; exit "$package_status"; }
  section "compatibility tier (installed during the main suite; its tests now)"
  touch "$tests_after"
  compat_status=0
  wait "$compat" || compat_status=$?
  cat "$logs/compat.log"
  [ "$compat_status" = 0 ] || exit "$compat_status"
  rm -rf "$logs"
fi
section_done
echo
echo "all tests passed in $(( ($(date +%s) - start) / 60 )) min $(( ($(date +%s) - start) % 60 )) s"
