"""Multi-worker training (tf.distribute.MultiWorkerMirroredStrategy): the
cluster TF_CONFIG describes, and a known failure of Keras's own fit there.

Keras 3.15's ``fit`` fails under MultiWorkerMirroredStrategy before the first
step (keras-team/keras#20585): to build the model it averages the first batch
across workers with ``strategy.reduce("MEAN", batch, axis=None)``, which
raises "Attempt to convert a value (PerReplica:{...}) ... to a Tensor"; with
that fixed, every step's scalar logs are averaged with ``axis=0``, which
fails too. ``WORKAROUND`` is the smallest patch that makes fit train; the
multi-worker tests run exactly this text in two worker processes.
"""

from __future__ import annotations

import json
import os
from typing import Any, List, Optional, Sequence

KERAS_ISSUE = "keras-team/keras#20585"

# Printed by `xla-keras doctor` when it applies; executed verbatim by tests/multiworker.py.
WORKAROUND = """\
# keras-team/keras#20585: make Keras 3.15's fit work under MultiWorkerMirroredStrategy.
# Run once, before model.fit, on every worker.
import tensorflow as tf
from keras.src import tree
from keras.src.backend.tensorflow import trainer as _trainer


def _build_from_first_replica(self, iterator=None, data_batch=None):
    # Build from this worker's first replica instead of averaging the batch across workers.
    if self._distribute_strategy is None:
        return
    if iterator is not None:
        for _, _, it in iterator:
            local = self.distribute_strategy.experimental_local_results
            data_batch = tree.map_structure(
                lambda v: local(v)[0] if isinstance(v, tf.distribute.DistributedValues) else v, next(it))
            break
    with self.distribute_strategy.scope():
        self._symbolic_build(data_batch=data_batch)


_reduce_per_replica = _trainer.reduce_per_replica


def _reduce_scalar_logs(values, strategy, reduction):
    # The logs are scalars: average them across workers without an axis.
    if reduction in ("auto", "mean") and _trainer._collective_all_reduce_multi_worker(strategy):
        return tree.map_structure(lambda v: strategy.reduce("MEAN", v, axis=None), values)
    return _reduce_per_replica(values, strategy, reduction)


_trainer.TensorFlowTrainer._maybe_symbolic_build = _build_from_first_replica
_trainer.reduce_per_replica = _reduce_scalar_logs
"""


def cluster_from_env(environ: Optional[dict] = None) -> Optional[dict]:
    """The cluster TF_CONFIG names: ``{"tasks": N, "task": "worker", "index": i,
    "chief": bool}``, or ``{"error": ...}`` when TF_CONFIG is not valid JSON,
    or None when it is not set (single-process training)."""
    raw = (os.environ if environ is None else environ).get("TF_CONFIG", "").strip()
    if not raw:
        return None
    try:
        config = json.loads(raw)
        cluster = config.get("cluster", {}) or {}
        task = config.get("task", {}) or {}
        tasks = sum(len(addresses) for kind, addresses in cluster.items() if kind in ("chief", "worker"))
        kind, index = task.get("type", "worker"), int(task.get("index", 0))
    except (ValueError, TypeError, AttributeError) as error:
        return {"error": f"TF_CONFIG is not a valid cluster description: {error}"}
    # As tf.distribute decides (multi_worker_util.is_chief): the "chief" task, or worker 0 when
    # there is none; an evaluator runs alone and is its own chief.
    chief = kind in ("chief", "evaluator") or (kind == "worker" and index == 0 and "chief" not in cluster)
    return {"tasks": tasks, "task": kind, "index": index, "chief": chief}


def keras_fit_problem() -> Optional[str]:
    """Why Keras's fit will fail under MultiWorkerMirroredStrategy, read from
    the installed Keras (None when the two faulty steps are not there, e.g.
    fixed upstream or patched with WORKAROUND)."""
    from xla_keras.backends.tensorflow import _internals

    faults: List[str] = _internals.keras_multi_worker_fit_faults()
    if not faults:
        return None
    what = {
        "build": "it averages the first batch across workers to build the model, which raises "
        '"Attempt to convert a value (PerReplica:{...}) ... to a Tensor" before the first step',
        "logs": "every step's scalar logs are averaged with axis=0, which fails once the first fault is fixed",
    }
    return (
        f"Keras {_internals.versions()['keras']}'s fit fails under MultiWorkerMirroredStrategy "
        f"({KERAS_ISSUE}): " + "; ".join(what[f] for f in faults)
    )


_GATHER: List[Any] = []  # (strategy, its gather function): one strategy per process in practice


def gather_rows(strategy: Any, process: int, values: Sequence[float]) -> List[List[float]]:
    """Every worker's ``values``, in worker order, by the strategy's own collective (an all-gather in a
    tf.function: ~3 ms on 2 CPU workers, where the eager one took ~47 ms). Every worker must call it at
    the same point. Marked out of auto-clustering: it adds no XLA module of its own."""
    import tensorflow as tf

    if not _GATHER or _GATHER[0][0] is not strategy:

        def gather(value):
            with tf.xla.experimental.jit_scope(compile_ops=False):
                per_replica = strategy.experimental_distribute_values_from_function(lambda context: value)
                return strategy.gather(per_replica, axis=0)

        _GATHER[:] = [(strategy, tf.function(gather, autograph=False))]
    rows = _GATHER[0][1](tf.constant([[float(process), *values]], tf.float32)).numpy()
    by_worker: dict = {}
    for row in rows:  # one row per replica: each worker's replicas gave the same
        by_worker.setdefault(int(row[0]), [float(v) for v in row[1:]])
    return [by_worker[i] for i in sorted(by_worker)]
