"""CI's venv cache (scripts/venv_cache.py): reused only while its pins are unchanged and it holds exactly
what was built; a copy per use, so that nothing a run installs reaches the cache."""

import json
import os
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))

import venv_cache  # noqa: E402 - scripts/ is on the path now


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XLA_KERAS_VENV_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(venv_cache, "VENV_OPTIONS", ["--without-pip"])  # a venv in a blink
    return tmp_path


def _site_packages(venv):
    lib = os.path.join(venv, "lib")
    return os.path.join(lib, os.listdir(lib)[0], "site-packages")


def _add_distribution(venv, name, version):
    """What an install leaves behind, as importlib.metadata (and pip) read it."""
    info = os.path.join(_site_packages(venv), f"{name}-{version}.dist-info")
    os.makedirs(info)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def _cached(cache):
    (entry,) = [e for e in os.listdir(cache / "cache") if not e.endswith(".lock")]
    return cache / "cache" / entry


def _get(cache, name="demo", requirements=("demo==1.0",)):
    """The venv at work/<name> as CI gets it; "installing" the pins writes demo 1.0 into it."""

    def install(python):
        _add_distribution(os.path.dirname(os.path.dirname(python)), "demo", "1.0")

    dest = str(cache / "work" / name)
    return dest, venv_cache.venv_with(name, sys.executable, list(requirements), dest, install)


def test_a_venv_is_built_once_then_copied_and_a_run_never_writes_into_the_cache(cache):
    dest, said = _get(cache)
    assert said.startswith("built and cached (none cached")
    assert venv_cache.packages(os.path.join(dest, "bin", "python")) == {"demo": "1.0"}
    _add_distribution(dest, "installed-by-the-run", "2.0")  # what a run installs into its copy

    dest, said = _get(cache)
    assert said.startswith("reused from the cache")
    assert venv_cache.packages(os.path.join(dest, "bin", "python")) == {"demo": "1.0"}  # a fresh copy


def test_a_changed_cached_venv_is_rebuilt_not_used(cache):
    _get(cache)
    _add_distribution(str(_cached(cache) / "venv"), "stray", "0.1")  # someone installed into the cache
    dest, said = _get(cache)
    assert said.startswith("built and cached (differs from what was built") and "stray" in said
    assert venv_cache.packages(os.path.join(dest, "bin", "python")) == {"demo": "1.0"}


def test_an_old_cached_venv_is_rebuilt(cache):
    _get(cache)
    manifest = _cached(cache) / "manifest.json"
    record = json.loads(manifest.read_text())
    record["built"] = time.time() - (venv_cache.MAX_AGE_DAYS + 1) * 86400
    manifest.write_text(json.dumps(record))
    _, said = _get(cache)
    assert said.startswith(f"built and cached (built {venv_cache.MAX_AGE_DAYS + 1} days ago")


def test_other_pins_get_their_own_venv_and_off_builds_fresh(cache, monkeypatch):
    _get(cache)
    _, said = _get(cache, requirements=("demo==1.1",))
    assert said.startswith("built and cached (none cached")
    assert len([e for e in os.listdir(cache / "cache") if not e.endswith(".lock")]) == 2
    monkeypatch.setenv("XLA_KERAS_VENV_CACHE", "off")
    _, said = _get(cache)
    assert said == "built fresh (cache off)"
