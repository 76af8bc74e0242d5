"""The scalars' tags the monitor writes (TensorBoard's ``xla/...`` charts): the session computes the
values, ``tensorboard/metadata.py`` lays the charts out. Pure."""

TAG_STEP_TIME = "xla/step_time_ms"
TAG_STEADY_STEP_TIME = "xla/steady_step_time_ms"
TAG_COMPILATIONS = "xla/compilations"
TAG_COMPILE_TIME = "xla/compile_time_ms"
TAG_DISTINCT_SIGNATURES = "xla/distinct_signatures"
TAG_STORM = "xla/storm"
TAG_FLOPS_PER_SECOND = "xla/flops_per_second"  # achieved at the steady step (the cost card)
TAG_MFU = "xla/mfu"  # of the device's peak, where it is known
SCALAR_TAGS = (
    TAG_STEP_TIME,
    TAG_STEADY_STEP_TIME,
    TAG_COMPILATIONS,
    TAG_COMPILE_TIME,
    TAG_DISTINCT_SIGNATURES,
    TAG_STORM,
    TAG_FLOPS_PER_SECOND,
    TAG_MFU,
)
