"""The exceptions and warning category users may catch. Pure."""

from __future__ import annotations

__all__ = [
    "XlaKerasWarning",
    "LogDirError",
    "RecompilationStormError",
    "UnsupportedOpError",
    "CompileAfterPrecompileError",
]


class XlaKerasWarning(UserWarning):
    """A configuration that will not do what was asked, or a storm.

    Every warning of xla_keras has this category: at most 4 lines of at most 100 characters, located
    at your own line (the ``model.fit`` call, or the monitor's construction). Filter it like any
    warning category.

    Example:
        `model`, `x`, `y`: any compiled Keras model and its data; a batch size that changes at every
        step is a recompilation storm (here at 3 new shapes).

        ```pycon
        >>> import warnings
        >>> def batches():
        ...     for n in (8, 16, 24):
        ...         yield x[:n], y[:n]
        >>> monitor = xla_keras.XlaMonitor(log_dir=None, jit="on", storm_threshold=3, verbose=0)
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     history = model.fit(batches(), verbose=0, callbacks=[monitor])
        >>> ours = [w for w in caught if w.category is xla_keras.XlaKerasWarning]
        >>> print(ours[0].message)  # doctest: +ELLIPSIS
        Recompilation storm (train): 3 new input shapes in 3 steps, 3 compiles, ... compiling
        Cause: the batch size (axis 0) of input 'x' varies (8..24, 3 values)
        Fix: batches = xla_keras.data.apply_fix(batches, monitor.report.storms[0].fix)  # size 24 so far
        More: monitor.report.storms[0].advice

        ```
    """


class LogDirError(OSError):
    """The log_dir cannot be written: the user's error, raised before the first step.

    An ``OSError`` (its ``errno`` is the one writing failed with), raised when the fit (or evaluate /
    predict) starts; ``log_dir=None`` keeps the report in memory and writes nothing.

    Example:
        `model`, `x`, `y`: any compiled Keras model and its data; a file stands where the log
        directory should be made.

        ```pycon
        >>> import tempfile
        >>> blocker = tempfile.NamedTemporaryFile()
        >>> monitor = xla_keras.XlaMonitor(log_dir=blocker.name + "/logs", verbose=0)
        >>> try:
        ...     history = model.fit(x, y, verbose=0, callbacks=[monitor])
        ... except xla_keras.LogDirError as error:
        ...     print(error)  # doctest: +ELLIPSIS
        [Errno 20] XlaMonitor cannot write to log_dir='.../logs': Not a directory. Pass a writable ...

        ```
    """


class RecompilationStormError(RuntimeError):
    """Raised by ``XlaMonitor(on_storm="raise")`` when a recompilation storm opens.

    The fit stops and the monitor's files are flushed; ``monitor.report`` holds the storm. The
    message is the storm's 4-line console message (what happened, cause, fix, where the full advice
    is: ``report.storms[i].advice``).

    Example:
        `model`, `x`, `y`: any compiled Keras model and its data; a batch size that changes at every
        step is a storm (here at 3 new shapes).

        ```pycon
        >>> def batches():
        ...     for n in (8, 16, 24, 32):
        ...         yield x[:n], y[:n]
        >>> monitor = xla_keras.XlaMonitor(log_dir=None, jit="on", storm_threshold=3, on_storm="raise", verbose=0)
        >>> try:
        ...     history = model.fit(batches(), verbose=0, callbacks=[monitor])
        ... except xla_keras.RecompilationStormError as error:
        ...     print(str(error).splitlines()[1])
        Cause: the batch size (axis 0) of input 'x' varies (8..24, 3 values)
        >>> monitor.report.steps["train"], monitor.report.run_state  # stopped at the storm
        (3, 'interrupted')

        ```
    """


class CompileAfterPrecompileError(RuntimeError):
    """Raised by ``XlaMonitor(on_new_signature="raise")`` when the step compiles after a precompile.

    Once a phase's shape set was compiled before its first step (``XlaMonitor(precompile=...)``), a compile
    in the loop is a shape the set missed (or a cause no shape set covers: a value, a retrace). The fit
    stops at that step, the monitor's files flushed; the message names the phase, the step, the signature
    and the cause, and ``monitor.report.precompile[phase]["missed"]`` holds it.

    Example:
        `model`, `x`, `y`: any compiled Keras model and its data; 48 rows in batches of 32 end with a batch
        of 16 that the precompiled set (one spec, 32 rows) missed.

        ```pycon
        >>> specs = [(keras.InputSpec(shape=(32, 4), dtype="float32"), keras.InputSpec(shape=(32, 1), dtype="float32"))]
        >>> monitor = xla_keras.XlaMonitor(
        ...     log_dir=None, jit="on", precompile=specs, on_new_signature="raise", verbose=0
        ... )
        >>> try:
        ...     history = model.fit(x[:48], y[:48], batch_size=32, verbose=0, callbacks=[monitor])
        ... except xla_keras.CompileAfterPrecompileError as error:
        ...     print(str(error).splitlines()[0])
        Compile after precompile (train step 2): x:float32[16,4] y:float32[16,1]
        >>> monitor.report.precompile["train"]["signatures"], monitor.report.compilations[0].precompiled
        (1, True)

        ```
    """


class UnsupportedOpError(RuntimeError):
    """XLA cannot compile an op of the step, and ``XlaMonitor(on_unsupported="raise")`` asked to stop.

    Raised from TensorFlow's ``InvalidArgumentError`` (or the error ``jax.jit`` raised while tracing): that
    error is its ``framework_error``, and its ``__cause__`` too where Keras's traceback filtering does not
    drop the chain (Keras re-raises from ``fit`` with ``from None``; ``__context__`` keeps it). The message
    (at most 4 lines) names the ops, their layers, the device type and the fix;
    ``monitor.report.unsupported_ops`` holds the same, and the report's files are flushed first. With
    ``on_unsupported="fallback"`` (the default) the fit goes on without XLA instead.

    Example:
        `x`, `y`: any model's data (here 4 features); on TensorFlow, ``tf.strings.as_string`` (AsString) has
        no XLA kernel.

        ```pycon
        >>> import tensorflow as tf
        >>> class Stringify(keras.layers.Layer):
        ...     def call(self, x):
        ...         return x + 0.0 * tf.cast(tf.strings.length(tf.strings.as_string(x)), x.dtype)
        >>> inputs = keras.Input((4,))
        >>> strict = keras.Model(inputs, keras.layers.Dense(1)(Stringify(name="stringify")(inputs)))
        >>> strict.compile("sgd", "mse")
        >>> monitor = xla_keras.XlaMonitor(log_dir=None, jit="on", on_unsupported="raise", verbose=0)
        >>> try:
        ...     history = strict.fit(x, y, verbose=0, callbacks=[monitor])
        ... except xla_keras.UnsupportedOpError as error:
        ...     print(str(error).splitlines()[0])
        ...     print(type(error.framework_error).__name__)
        XLA cannot compile AsString in layer 'stringify' at train step 1 (XLA_CPU_JIT)
        InvalidArgumentError
        >>> monitor.report.unsupported_ops["layers"], monitor.report.jit_active
        (['stringify'], False)

        ```
    """

    def __init__(self, message: str, framework_error: BaseException):
        super().__init__(message)
        self.framework_error = framework_error
