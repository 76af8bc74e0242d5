"""A copy of this checkout to build or install from, so that no check writes into the checkout.

`pip install .` and `python -m build` write into the tree they build (build/, *.egg-info, the sdist's
staging directory xla_keras-<version>/), and the checks that run side by side (the compatibility
tier's installs, the packaging proof) each read the whole tree: building in the checkout let one
copy another's half-removed staging files (`[Errno 2] No such file or directory: .../xla_keras-
0.2.0.dev0/...`). Each check builds from a copy of its own.
"""

from __future__ import annotations

import os
import shutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# What building leaves in a tree, and what no build reads: version control, caches, logs.
NOT_SOURCE = (
    ".git",
    "build",
    "dist",
    "*.egg-info",
    "xla_keras-*",
    "__pycache__",
    ".*_cache",
    ".hypothesis",
    ".coverage*",
    "logs",
)


def copy_of_checkout(dest: str) -> str:
    """This repository's source files in ``dest`` (created; must not exist). Returns ``dest``."""
    shutil.copytree(ROOT, dest, ignore=shutil.ignore_patterns(*NOT_SOURCE))
    return dest
