"""The compile-time sidecar beside a persistent cache: safe to share, cheap to write. Pure (no TensorFlow).

One small file per entry, replaced atomically: two processes writing at once lose nothing, a
compile rewrites only its own entry, a failed write leaves no temporary file, and entries get
the umask's permissions (0.1's single file was 0600 and was rewritten whole at every compile).
"""

import json
import os
import stat
import subprocess
import sys

import pytest

from xla_keras.core import cache
from xla_keras.core.cache import ENTRIES, LEGACY_SIDECAR, CacheAccount, CompileTimes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WRITER = """
import sys
from xla_keras.core.cache import CompileTimes
times = CompileTimes(sys.argv[1])
for i in range(int(sys.argv[3])):
    times.put(f"{sys.argv[2]}|{i}", i / 1000)
print("WROTE")
"""


def test_two_processes_writing_at_once_lose_no_entry(tmp_path):
    n = 300
    env = dict(os.environ, PYTHONPATH=ROOT)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path), name, str(n)], env=env, stdout=subprocess.PIPE, text=True
        )
        for name in ("a", "b")
    ]
    assert [p.communicate(timeout=120)[0].strip() for p in procs] == ["WROTE", "WROTE"]
    times = CompileTimes(str(tmp_path))
    for name in ("a", "b"):
        assert [times.get(f"{name}|{i}") for i in range(n)] == pytest.approx([i / 1000 for i in range(n)])
    assert len(os.listdir(tmp_path / ENTRIES)) == 2 * n
    assert not [f for f in os.listdir(tmp_path / ENTRIES) if f.endswith(".tmp")]


def test_a_compile_writes_only_its_own_entry(tmp_path):
    times = CompileTimes(str(tmp_path))
    times.put("first", 1.0)
    [first] = (tmp_path / ENTRIES).iterdir()
    before = first.stat().st_mtime_ns, first.read_text()
    times.put("second", 2.0)
    assert (first.stat().st_mtime_ns, first.read_text()) == before
    assert times.get("first") == 1.0 and times.get("second") == 2.0 and times.get("third") is None


def test_entries_get_the_umasks_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        CompileTimes(str(tmp_path)).put("key", 1.0)
    finally:
        os.umask(old)
    [entry] = (tmp_path / ENTRIES).iterdir()
    assert stat.S_IMODE(entry.stat().st_mode) == 0o644


def test_a_failed_write_leaves_no_temporary_file_and_is_not_fatal(tmp_path, monkeypatch):
    def full(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cache.os, "replace", full)
    CompileTimes(str(tmp_path)).put("key", 1.0)  # best effort: no exception
    assert os.listdir(tmp_path / ENTRIES) == []
    with pytest.raises(KeyboardInterrupt):
        monkeypatch.setattr(cache.os, "replace", lambda src, dst: (_ for _ in ()).throw(KeyboardInterrupt()))
        cache.atomic_write_text(str(tmp_path / "x.json"), "{}")
    assert os.listdir(tmp_path) == [ENTRIES]


def test_the_single_file_sidecar_of_0_1_is_still_read(tmp_path):
    (tmp_path / LEGACY_SIDECAR).write_text(json.dumps({"old|key": 0.5}))
    times = CompileTimes(str(tmp_path))
    assert times.get("old|key") == 0.5
    times.put("old|key", 0.25)  # a newer measurement wins
    assert CompileTimes(str(tmp_path)).get("old|key") == 0.25


def test_a_load_is_credited_with_what_the_fresh_compile_cost(tmp_path):
    account = CacheAccount(CompileTimes(str(tmp_path)), "model", "on")
    account.record("train", "x:float32[8,4]", 0, 0.40, cached=False)  # process 1 compiles
    account.record("train", "x:float32[8,4]", 0, 0.10, cached=True)  # process 2 loads
    account.record("train", "x:float32[9,4]", 0, 0.10, cached=True)  # a load with no fresh time on record
    account.record("train", "x:float32[7,4]", 0, 0.30, cached=None)  # compile or load: unknown, not learnt
    assert account.saved_seconds == pytest.approx(0.30)
    assert (account.loads_known, account.loads_unknown) == (1, 1)
    assert CompileTimes(str(tmp_path)).get("model|train|on|x:float32[7,4]|0") is None
