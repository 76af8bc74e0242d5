#!/usr/bin/env bash
# Install what the tests need, then run them all (this is what CI runs, via .ci/run):
#   1. the main suite on the newest pair (TensorFlow 2.21, Keras 3.15, this Python);
#   2. the compatibility tier: fresh venvs pinned to older TensorFlow releases (install check,
#      ground truth, private APIs, older Keras / tf_keras), scripts/compat.py;
#   3. the packaging proof: sdist + wheel, installed in a clean venv, scripts/package_check.py.
# `bash scripts/test.sh --main` runs only 1 (after the install).
set -euo pipefail
cd "$(dirname "$0")/.."
section() { echo; echo "=== $1 ($(date +%H:%M:%S))"; }
start=$(date +%s)
section "install"
bash scripts/install_test_deps.sh
section "main suite"
python -m pytest -q
if [ "${1:-}" != "--main" ]; then
  section "compatibility tier"
  python scripts/compat.py
  section "packaging"
  python scripts/package_check.py
fi
echo
echo "all tests passed in $(( ($(date +%s) - start) / 60 )) min $(( ($(date +%s) - start) % 60 )) s"
