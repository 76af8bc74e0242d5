"""The Profile tab (tensorboard-plugin-profile / xprof): is it installed, and the line that installs it."""

from __future__ import annotations

import importlib.util

from xla_keras.core.versions import installed_version, release


def profile_tab_installed() -> bool:
    return bool(importlib.util.find_spec("tensorboard_plugin_profile") or importlib.util.find_spec("xprof"))


def profile_tab_install() -> str:
    """The line that installs the Profile tab's plugin without changing a package the user pinned.

    Measured with pip (2026-12): tensorboard-plugin-profile 2.20+ is a shim for xprof (about 40
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
