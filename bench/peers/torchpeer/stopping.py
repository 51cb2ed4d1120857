"""When one point has been measured enough: batchsweep's NoiseCriterion (src/sweep/stopping.cpp) with the same
defaults, rules, stop reasons and warnings, so that both tools stop a point for the same reasons."""

import math
import time
from dataclasses import asdict, dataclass
from typing import Callable, Optional

from .errors import UsageError
from .stats import relative_noise


@dataclass
class StoppingSettings:
    warmup_steps: int = 3  # untimed steps after building the point
    min_samples: int = 10  # timed steps at least
    min_time_s: float = 0.5  # sum of the timed step times at least
    max_noise_pct: float = 1.0  # stddev / mean * 100 of all timed samples at most
    timeout_s: float = 10.0  # wall clock per point (build and warm-up included)
    max_samples: int = 10000  # hard cap so a 1 us step cannot run forever

    def validate(self):
        """Raises UsageError naming the flag, with batchsweep's messages."""
        if self.warmup_steps < 0:
            raise UsageError(f"--warmup: must be at least 0, got {self.warmup_steps}")
        if self.min_samples < 1:
            raise UsageError(f"--min-samples: must be at least 1, got {self.min_samples}")
        if not (math.isfinite(self.min_time_s) and self.min_time_s >= 0):
            raise UsageError(f"--min-time: must be a number of seconds >= 0, got {self.min_time_s}")
        if not (math.isfinite(self.max_noise_pct) and self.max_noise_pct > 0):
            raise UsageError(f"--max-noise: must be a percentage > 0, got {self.max_noise_pct}")
        if not (math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise UsageError(f"--timeout: must be a number of seconds > 0, got {self.timeout_s}")
        if self.max_samples < self.min_samples:
            raise UsageError(f"--min-samples: {self.min_samples} is above the sample cap {self.max_samples}")

    def to_json(self) -> dict:
        return asdict(self)


class NoiseCriterion:
    """Finished when (a) samples >= min_samples and their sum >= min_time_s and noise <= max_noise_pct
    ("noise target"), or (b) the wall clock since construction reaches timeout_s ("timeout"), or (c) samples
    reach max_samples ("sample cap"). The clock (seconds, monotonic) is injectable for tests."""

    def __init__(self, settings: StoppingSettings, clock: Optional[Callable[[], float]] = None):
        self._settings = settings
        self._clock = clock or time.monotonic
        self._start_s = self._clock()
        self._elapsed_at_stop_s = 0.0
        self._samples_ms = []
        self._measured_ms = 0.0
        self._stop = ""

    def add_measurement(self, step_ms: float):
        self._samples_ms.append(step_ms)
        self._measured_ms += step_ms

    def noise_pct(self) -> float:
        return relative_noise(self._samples_ms) * 100.0

    @property
    def samples(self) -> int:
        return len(self._samples_ms)

    @property
    def measured_s(self) -> float:
        return self._measured_ms / 1000.0

    def is_finished(self) -> bool:
        if self._stop:
            return True
        s = self._settings
        elapsed_s = self._clock() - self._start_s
        if (len(self._samples_ms) >= s.min_samples and self._measured_ms >= s.min_time_s * 1000.0
                and self.noise_pct() <= s.max_noise_pct):
            self._stop = "noise target"
        elif elapsed_s >= s.timeout_s:
            self._stop = "timeout"
        elif len(self._samples_ms) >= s.max_samples:
            self._stop = "sample cap"
        if self._stop:
            self._elapsed_at_stop_s = elapsed_s
        return bool(self._stop)

    def stop_reason(self) -> str:
        """"noise target", "timeout" or "sample cap"; empty while not finished."""
        return self._stop

    def warning(self) -> Optional[str]:
        """Which limit ended the point short of its targets, by how much, and the flag that helps; else None."""
        if self._stop not in ("timeout", "sample cap"):
            return None
        s = self._settings
        missed = []
        noise = self.noise_pct()
        if noise > s.max_noise_pct:
            missed.append(f"noise {noise:.1f}% > {s.max_noise_pct:g}% target")
        if len(self._samples_ms) < s.min_samples:
            missed.append(f"{len(self._samples_ms)} samples < {s.min_samples} minimum")
        if self._measured_ms < s.min_time_s * 1000.0:
            missed.append(f"{self.measured_s:.2f} s measured < {s.min_time_s:g} s minimum")
        what = ", ".join(missed) if missed else "all targets met at the same moment"
        if self._stop == "timeout":
            hint = "raise --timeout or relax --max-noise" if noise > s.max_noise_pct else "raise --timeout"
            return (f"timeout {s.timeout_s:g} s reached after {self._elapsed_at_stop_s:.1f} s with {what} "
                    f"({hint})")
        return f"sample cap {s.max_samples} reached with {what} (relax --max-noise or raise --min-time)"
