"""The documented path of the MultiWorkerMirroredStrategy patch: ``xla_keras.multiworker.WORKAROUND``
(keras-team/keras#20585). It lives with the TensorFlow backend."""

from xla_keras.backends.tensorflow.multiworker import KERAS_ISSUE, WORKAROUND

__all__ = ["KERAS_ISSUE", "WORKAROUND"]
