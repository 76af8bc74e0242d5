"""The typed Fix: one frozen record per kind, read from and written to the JSON keys saved reports hold,
and an exhaustive ``match`` in its consumers that mypy checks.

Ground truth for the keys: ``tests/data/fixes_as_saved.jsonl``, fixes written by the dict-based advice
before the typed records existed (one line per kind and key combination: every kind, a pad fix with
and without real lengths, with a bucketing part, over two inputs, for each kind of data), then each
kind added since as a report first wrote it (a pad fix of images holding its ``bucket_by_size`` part;
``static_value``).
"""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import xla_keras
from xla_keras.storms.detection import Storm
from xla_keras.storms.fixes import (
    KINDS,
    BucketByLength,
    BucketBySize,
    DropRemainder,
    FixedBatchSize,
    PadToLengths,
    UnknownFix,
    cause_clause,
    fix_from_dict,
    fix_line,
    fix_value,
)

ROOT = pathlib.Path(__file__).resolve().parent.parent
SAVED = [line for line in (ROOT / "tests/data/fixes_as_saved.jsonl").read_text().splitlines() if line]


def test_the_saved_fixes_cover_every_kind():
    kinds = {json.loads(line)["kind"] for line in SAVED}
    nested = {
        json.loads(line).get(part, {}).get("kind") for line in SAVED for part in ("bucket_by_length", "bucket_by_size")
    } - {None}
    assert kinds | nested == set(KINDS)


@pytest.mark.parametrize("line", SAVED, ids=[f"{i}-{json.loads(s)['kind']}" for i, s in enumerate(SAVED)])
def test_a_saved_fix_reads_as_its_kind_and_writes_the_same_keys_in_the_same_order(line):
    saved = json.loads(line)
    fix = fix_from_dict(saved)
    assert fix.kind == saved["kind"] and type(fix).kind == saved["kind"]
    assert json.dumps(fix.to_dict()) == line  # keys, order and values as saved
    assert fix == saved and dict(fix) == saved and fix["kind"] == saved["kind"]  # the mapping of earlier versions
    assert fix_from_dict(fix.to_dict()).to_dict() == saved
    if "bucket_by_length" in saved:
        assert isinstance(fix.bucket_by_length, BucketByLength)  # typed; the mapping gives its JSON
    if "bucket_by_size" in saved:
        assert isinstance(fix.bucket_by_size, BucketBySize)


def test_a_fix_is_frozen_and_a_dict_given_for_one_is_read_as_its_kind():
    fix = FixedBatchSize(size=24, batch_size=24, remainder="drop")
    with pytest.raises(AttributeError):
        fix.size = 8  # type: ignore[misc]
    storm = Storm("train", 9, 8, fix={"kind": "drop_remainder", "rows": 16, "batch_size": 48, "remainder": "drop"})
    assert isinstance(storm.fix, DropRemainder) and storm.fix.rows == 16
    assert Storm.from_dict(storm.to_dict()).fix == storm.fix
    assert isinstance(fix_from_dict({"kind": "a kind of a newer version"}), UnknownFix)


def test_consumers_read_the_typed_fix():
    pad = PadToLengths(targets=[{"path": "x", "axis": 1, "lengths": [32, 64]}], batch_size=16)
    assert fix_value(pad) == "lengths [32, 64], batch size 16"
    assert fix_value(FixedBatchSize(size=25)) == "size 25"
    assert fix_line(DropRemainder(data="arrays"), "f") == "batches = xla_keras.data.apply_fix(batches, f)"
    assert cause_clause([], DropRemainder(rows=16, batch_size=48)) == "the last batch has 16 rows instead of 48"
    batches = [(np.ones((48, 4)), np.ones((48, 1))), (np.ones((16, 4)), np.ones((16, 1)))]
    fixed = xla_keras.data.apply_fix(batches, DropRemainder(batch_size=48, remainder="drop"))
    assert [batch[0].shape for batch in fixed] == [(48, 4)]


# Each consumer's dispatch, and the branch removed from a copy of its module: mypy must fail there.
BRANCHES = [
    ("xla_keras/storms/fixes.py", "fix_value", "        case FixedBatchSize():\n"),
    ("xla_keras/storms/fixes.py", "fix_line", "        case ConsistentStructure():\n"),
    ("xla_keras/storms/fixes.py", "cause_clause", "        case FixedBatchSize():\n"),
]


def _without_branch(source: str, function: str, case: str) -> str:
    """``source`` with the ``case`` branch of ``function``'s match removed (the case line and its body)."""
    start = source.index(f"def {function}(")
    at = source.index(case, start)
    end = re.compile(r"^        case ", re.M).search(source, at + len(case))
    assert end is not None
    return source[:at] + source[end.start() :]


def test_mypy_fails_where_a_fix_kind_has_no_branch(tmp_path):
    files = []
    for i, (module, function, case) in enumerate(BRANCHES):
        source = (ROOT / module).read_text()
        (tmp_path / f"intact_{i}.py").write_text(source)
        (tmp_path / f"without_{i}.py").write_text(_without_branch(source, function, case))
        files += [f"intact_{i}.py", f"without_{i}.py"]
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--follow-imports=silent", "--cache-dir", str(tmp_path / "cache"), *files],
        cwd=tmp_path,
        env={"MYPYPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert result.returncode == 1, result.stdout + result.stderr
    for i in range(len(BRANCHES)):
        assert not any(line.startswith(f"intact_{i}.py") for line in errors), errors
        mine = [line for line in errors if line.startswith(f"without_{i}.py")]
        assert len(mine) == 1 and "assert_never" in mine[0], (BRANCHES[i], errors)
