#!/usr/bin/env bash
# Everything the test suite needs on a fresh machine: the package with its `test` extra
# (pytest, hypothesis, playwright's Python driver, the Profile tab's plugin, build, ...), its `docs`
# extra (MkDocs, Material, mkdocstrings: the static checks build the site) and
# Debian's Chromium, which the browser test drives headless (no browser is downloaded by
# playwright). The compatibility tier (scripts/compat.py) makes its own venvs; it needs the
# Python 3.10, 3.12 and 3.13 interpreters (pyenv) and says so when one is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --quiet --upgrade pip
python -m pip install --quiet -e ".[test,docs]"
if ! command -v chromium >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium
fi
