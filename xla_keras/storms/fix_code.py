"""A fix as code: the one line that applies it with ``xla_keras.data``, and its compiles in words. Pure."""

from __future__ import annotations

from typing import Any, Dict


def _call(function: str, fix: Dict[str, Any], data: str, extra: str = "") -> str:
    """The one line that applies ``fix`` with ``xla_keras.data``, with the fix written out so the
    line stands alone (no ``storm`` object needed)."""
    minimal = {
        k: fix[k]
        for k in ("kind", "targets", "length_of", "lengths", "size", "rows", "batch_size", "remainder")
        if k in fix
    }
    if fix.get("kind") != "bucket_by_length":
        minimal.pop("lengths", None)  # the targets carry them
    name = "ds" if data == "tf.data" else "batches"
    source = "examples" if function == "bucket_by_length" else name
    return f"import xla_keras\n{name} = xla_keras.data.{function}({source}, {minimal!r}{extra})"


def apply_code(fix: Dict[str, Any], data: str) -> str:
    where = (
        "  # on the dataset as you batched it"
        if data == "tf.data"
        else "  # numpy / generator batches -> a keras.utils.PyDataset"
    )
    return _call("apply_fix", fix, data) + where


def bucket_code(fix: Dict[str, Any], data: str) -> str:
    where = (
        "  # on the dataset of single examples, before batching"
        if data == "tf.data"
        else "  # an iterable of single examples -> a keras.utils.PyDataset"
    )
    return _call("bucket_by_length", fix, data) + where


def compiles_words(n: int) -> str:
    return f"{n} compile" + ("" if n == 1 else "s")
