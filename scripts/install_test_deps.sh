#!/usr/bin/env bash
# Everything the test suite needs on a fresh machine: the package with its `test` extra
# (pytest, hypothesis, playwright's Python driver, ...) and Debian's Chromium, which the
# browser test drives headless (no browser is downloaded by playwright).
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --quiet --upgrade pip
python -m pip install --quiet -e ".[test]"
if ! command -v chromium >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium
fi
