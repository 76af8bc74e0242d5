"""Which TensorFlow and Keras run here, read without importing them, and the oldest Keras the monitor supports;
whether the Profile tab's plugin is installed, and the pip line that installs it keeping the user's pins.

Doctor must not start TensorFlow before it has checked TF_XLA_FLAGS: versions
come from the loaded module's ``__version__`` or from package metadata.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Optional, Tuple

# Other distributions of the same modules: pip metadata names the distribution, not the module.
_DISTRIBUTIONS = {
    "tensorflow": (
        "tensorflow",
        "tensorflow-cpu",
        "tensorflow-gpu",
        "tensorflow-intel",
        "tensorflow-macos",
        "tf-nightly",
        "tf-nightly-cpu",
        "intel-tensorflow",
    ),
    "keras": ("keras", "keras-nightly"),
}

# Keras 3.0-3.6 builds `one_step_on_iterator`, which calls next(iterator) inside
# a tf.function: there is no branch that takes a list of batches, and handing it
# one crashes fit ("'list' object is not an iterator"). 3.7 added that branch.
MIN_KERAS = (3, 7)


def installed_version(package: str) -> str:
    """The version of ``package`` as the running process sees it: the imported module's own
    ``__version__`` when it is loaded, else the metadata of whichever distribution provides it
    (tensorflow-cpu, keras-nightly, ...). Never imports the module."""
    module = sys.modules.get(package)
    if module is not None and isinstance(getattr(module, "__version__", None), str):
        return module.__version__
    for distribution in _DISTRIBUTIONS.get(package, (package,)):
        try:
            return version(distribution)
        except PackageNotFoundError:
            continue
        except Exception:  # noqa: BLE001 - a version string is best effort
            break
    return "unknown"


def release(text: str) -> Tuple[int, ...]:
    """(major, minor, patch) of a version string such as "2.16.2" or "3.7.0.dev2024"."""
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3]) or (0,)


def keras_unsupported() -> Optional[str]:
    """Why the installed Keras cannot be monitored, or None."""
    installed = release(installed_version("keras"))
    if installed >= MIN_KERAS or installed == (0,):  # unknown (no version found): assume it can
        return None
    return (
        f"Keras {installed_version('keras')} is older than {'.'.join(map(str, MIN_KERAS))}: its train function "
        "pulls batches inside a tf.function (one_step_on_iterator), so the monitor cannot read the input "
        'shapes without breaking fit. The fit goes on unmonitored. Fix: pip install "keras>=3.7" '
        "(it runs on TensorFlow 2.16 and later)"
    )


def tensorflow_version() -> Tuple[int, ...]:
    """(major, minor, patch) of the installed TensorFlow; (0,) when none is found."""
    return release(installed_version("tensorflow"))


def versions_line(packages: Tuple[str, ...]) -> str:
    """``"tensorflow 2.21.0, keras 3.15.1, ..., xla_keras 0.2.0"``: doctor's versions finding."""
    from xla_keras import __version__

    return ", ".join(f"{name} {installed_version(name)}" for name in packages) + f", xla_keras {__version__}"


# The Profile tab (tensorboard-plugin-profile / xprof): is it installed, and the line that installs it.


def profile_tab_installed() -> bool:
    return bool(importlib.util.find_spec("tensorboard_plugin_profile") or importlib.util.find_spec("xprof"))


def profile_tab_install() -> str:
    """The line that installs the Profile tab's plugin without changing a package the user pinned.

    Measured with pip: tensorboard-plugin-profile 2.20+ is a shim for xprof (about 40
    packages with its Google Cloud Storage client); unpinned, pip does not re-check TensorFlow's
    protobuf pin and installed protobuf 7 over TensorFlow 2.16-2.19 (which then fails to import),
    and with TensorFlow 2.16's protobuf<5 in the request its resolver backtracked for more than five
    minutes. Releases 2.16-2.19.0 need only protobuf<5 and three small packages. So: the release that
    matches TensorFlow where protobuf is older than 5, else the current plugin with TensorFlow and
    protobuf held where they are."""
    tf_version = installed_version("tensorflow")  # read from package metadata: TensorFlow is not imported
    protobuf = installed_version("protobuf")
    if release(protobuf) < (5,):
        minor = min(max((release(tf_version) + (0, 16))[1], 16), 19)
        return f'pip install "tensorboard-plugin-profile==2.{minor}.0"'
    return f'pip install tensorboard-plugin-profile "tensorflow=={tf_version}" "protobuf=={protobuf}"'
