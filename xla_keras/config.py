"""MonitorConfig: every XlaMonitor argument, validated once. Pure.

Bad input fails at construction with a ValueError / TypeError that names the
valid choices; values Keras users pass (numpy integers, ``pathlib.Path``,
``~``) are taken as Keras takes them and normalised here, so the rest of the
package reads plain ints and strings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Tuple, Union

from xla_keras.core.plain_data import directory, integer, number
from xla_keras.core.precompile import (
    OnNewSignature,
    PrecompileSource,
    validate_on_new_signature,
    validate_precompile,
    validate_threads,
)
from xla_keras.core.program_cost import COST_CHOICES
from xla_keras.jit.modes import MODES, JitMode, validate_mode
from xla_keras.jit.unsupported import ON_UNSUPPORTED
from xla_keras.storms.detection import ON_STORM, STORM_THRESHOLD, STORM_WINDOW, StormRule

UPDATE_FREQS = ("epoch", "batch")
VERBOSITY = (0, 1, 2)


@dataclass(frozen=True)
class MonitorConfig:
    """XlaMonitor's arguments, validated once and normalised (``monitor.config``).

    Values Keras users pass (numpy integers, ``pathlib.Path``, ``~``) are taken as Keras takes
    them and normalised, so the monitor reads plain ints and strings.

    Args:
        log_dir: as ``XlaMonitor``'s; kept as a str with ``~`` expanded, or None.
        jit: as ``XlaMonitor``'s.
        storm_threshold: as ``XlaMonitor``'s.
        storm_window: as ``XlaMonitor``'s.
        on_storm: as ``XlaMonitor``'s.
        profile: as ``XlaMonitor``'s; kept as ``"auto"``, None or a ``(start, stop)`` tuple.
        update_freq: as ``XlaMonitor``'s; kept as ``"epoch"`` or an int (``"batch"`` is 1).
        verbose: as ``XlaMonitor``'s.
        max_records: as ``XlaMonitor``'s.
        compile_budget: as ``XlaMonitor``'s.
        compile_budget_floor: as ``XlaMonitor``'s.
        cost: as ``XlaMonitor``'s.
        peak_flops: as ``XlaMonitor``'s; kept as a float or None.
        on_unsupported: as ``XlaMonitor``'s.
        precompile: as ``XlaMonitor``'s; kept as None, ``"auto"``, a path (``~`` expanded) or the specs'
            input signatures.
        precompile_threads: as ``XlaMonitor``'s.
        on_new_signature: as ``XlaMonitor``'s.

    Raises:
        ValueError: an argument outside its choices (the message names them).
        TypeError: a ``log_dir`` that is neither a path (str, ``os.PathLike``) nor None.

    Example:
        ```pycon
        >>> config = xla_keras.MonitorConfig(log_dir=None, update_freq="batch", profile=[3, 5])
        >>> config.update_freq, config.profile
        (1, (3, 5))
        >>> xla_keras.MonitorConfig(on_storm="stop")
        Traceback (most recent call last):
          ...
        ValueError: on_storm must be one of 'warn', 'raise', 'fallback'; got 'stop'

        ```
    """

    log_dir: Optional[str] = "logs/xla"
    jit: JitMode = "keep"
    storm_threshold: int = STORM_THRESHOLD
    storm_window: int = STORM_WINDOW
    on_storm: str = "warn"
    profile: Union[str, None, Tuple[int, int]] = "auto"
    update_freq: Union[str, int] = "epoch"
    verbose: int = 1
    max_records: int = 1000
    compile_budget: Optional[float] = 0.10
    compile_budget_floor: float = 1.0
    cost: str = "auto"
    peak_flops: Optional[float] = None
    on_unsupported: str = "fallback"
    precompile: PrecompileSource = None
    precompile_threads: Optional[int] = None
    on_new_signature: OnNewSignature = "warn"

    def __post_init__(self):
        fix = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731 - frozen
        fix("log_dir", directory(self.log_dir, "log_dir"))
        fix("jit", validate_mode(self.jit, MODES))
        threshold, window = integer(self.storm_threshold), integer(self.storm_window)
        if threshold is None or threshold < 2:
            raise ValueError(f"storm_threshold must be an int >= 2; got {self.storm_threshold!r}")
        if window is None or window < 1:
            raise ValueError(f"storm_window must be an int >= 1; got {self.storm_window!r}")
        fix("storm_threshold", threshold)
        fix("storm_window", window)
        if not isinstance(self.on_storm, str) or self.on_storm not in ON_STORM:
            raise ValueError(f"on_storm must be one of {', '.join(map(repr, ON_STORM))}; got {self.on_storm!r}")
        fix("profile", _profile(self.profile))
        fix("update_freq", _update_freq(self.update_freq))
        if integer(self.verbose) not in VERBOSITY:
            raise ValueError(f"verbose must be 0, 1 or 2; got {self.verbose!r}")
        fix("verbose", integer(self.verbose))
        if integer(self.max_records) is None or self.max_records < 1:
            raise ValueError(f"max_records must be an int >= 1; got {self.max_records!r}")
        fix("max_records", integer(self.max_records))
        fix("compile_budget", _compile_budget(self.compile_budget))
        fix("compile_budget_floor", _seconds(self.compile_budget_floor, "compile_budget_floor"))
        if not isinstance(self.cost, str) or self.cost not in COST_CHOICES:
            raise ValueError(f"cost must be one of {', '.join(map(repr, COST_CHOICES))}; got {self.cost!r}")
        fix("peak_flops", _peak_flops(self.peak_flops))
        if not isinstance(self.on_unsupported, str) or self.on_unsupported not in ON_UNSUPPORTED:
            raise ValueError(
                f"on_unsupported must be one of {', '.join(map(repr, ON_UNSUPPORTED))}; got {self.on_unsupported!r}"
            )
        fix("precompile", validate_precompile(self.precompile))
        fix("precompile_threads", validate_threads(integer(self.precompile_threads) or self.precompile_threads))
        fix("on_new_signature", validate_on_new_signature(self.on_new_signature))

    @property
    def storm_rule(self) -> StormRule:
        """``storm_threshold`` new signatures within ``storm_window`` steps: what opens a storm."""
        return StormRule(self.storm_threshold, self.storm_window)

    @property
    def steps_per_scalar(self) -> Optional[int]:
        """Write ``xla/step_time_ms`` every this many steady steps; None: once per epoch."""
        return None if self.update_freq == "epoch" else int(self.update_freq)


def _compile_budget(budget: Any) -> Optional[float]:
    value = number(budget)
    if budget is None or value is not None and 0.0 < value < 1.0:
        return value
    raise ValueError(
        f"compile_budget must be a share of a phase's time in (0, 1), e.g. 0.1, or None (no budget "
        f"advice); got {budget!r}"
    )


def _peak_flops(value: Any) -> Optional[float]:
    flops = number(value)
    if value is None or flops is not None and flops > 0.0:
        return flops
    raise ValueError(
        f"peak_flops must be one device's peak FLOP/s > 0, e.g. 312e12, or None (the table); got {value!r}"
    )


def _seconds(value: Any, name: str) -> float:
    seconds = number(value)
    if seconds is not None and seconds >= 0.0:
        return seconds
    raise ValueError(f"{name} must be a number of seconds >= 0, e.g. 1.0 (0: the share alone decides); got {value!r}")


def _profile(profile: Any) -> Union[str, None, Tuple[int, int]]:
    if profile is None or isinstance(profile, str) and profile == "auto":
        return profile
    start, stop = map(integer, profile) if isinstance(profile, (tuple, list)) and len(profile) == 2 else (None, None)
    if start is None or stop is None or not 1 <= start <= stop:
        raise ValueError(
            f"profile must be 'auto', None or (start, stop) train steps with 1 <= start <= stop; got {profile!r}"
        )
    return start, stop


def _update_freq(update_freq: Any) -> Union[str, int]:
    steps = integer(update_freq)
    if steps is not None and steps >= 1:
        return steps
    if isinstance(update_freq, str) and update_freq in UPDATE_FREQS:
        return "epoch" if update_freq == "epoch" else 1
    raise ValueError(
        f"update_freq must be one of {', '.join(map(repr, UPDATE_FREQS))} or an int >= 1; got {update_freq!r}"
    )
