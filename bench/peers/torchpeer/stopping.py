"""When one point has been measured enough: batchsweep's NoiseCriterion (src/sweep/stopping.cpp) with the same
defaults but the timeout (10 s against 5 s: the point's clock includes building the PyTorch model), and the same
rules, stop reasons and warnings, so that both tools stop a point for the same reasons."""

import math
import time
from collections import deque
from dataclasses import asdict, dataclass
from typing import Callable, Optional

from .errors import UsageError


@dataclass
class StoppingSettings:
    warmup_steps: int = 3  # untimed steps after building the point
    # untimed seconds at least after warmup_steps (GPU clocks leave idle); None: 0.2 on CUDA, 0 elsewhere
    warmup_time_s: Optional[float] = None
    min_samples: int = 10  # timed steps at least
    min_time_s: float = 0.5  # sum of the timed step times at least
    max_noise_pct: float = 1.0  # stddev / mean * 100 of all timed samples at most
    timeout_s: float = 10.0  # wall clock per point (build and warm-up included)
    max_samples: int = 10000  # the sample cap (--max-samples), so a 1 us step cannot run forever

    def validate(self):
        """Raises UsageError naming the flag, with batchsweep's messages."""
        if self.warmup_steps < 0:
            raise UsageError(f"--warmup: must be at least 0, got {self.warmup_steps}")
        if self.warmup_time_s is not None and not (math.isfinite(self.warmup_time_s) and self.warmup_time_s >= 0):
            raise UsageError(f"--warmup-time: must be a number of seconds >= 0, got {self.warmup_time_s}")
        if self.min_samples < 1:
            raise UsageError(f"--min-samples: must be at least 1, got {self.min_samples}")
        if not (math.isfinite(self.min_time_s) and self.min_time_s >= 0):
            raise UsageError(f"--min-time: must be a number of seconds >= 0, got {self.min_time_s}")
        if not (math.isfinite(self.max_noise_pct) and self.max_noise_pct > 0):
            raise UsageError(f"--max-noise: must be a percentage > 0, got {self.max_noise_pct}")
        if not (math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise UsageError(f"--timeout: must be a number of seconds > 0, got {self.timeout_s}")
        if not 1 <= self.max_samples <= 100000:
            raise UsageError(f"--max-samples: must be in 1..100000, got {self.max_samples}")
        if self.max_samples < self.min_samples:
            raise UsageError(f"--min-samples: {self.min_samples} is above the sample cap {self.max_samples} "
                             "(--max-samples)")

    def resolved_warmup_time_s(self, cuda: bool) -> float:
        """batchsweep's warmup_time_s: --warmup-time where given, else 0.2 s on CUDA (trtexec's warm-up)."""
        if self.warmup_time_s is not None:
            return self.warmup_time_s
        return 0.2 if cuda else 0.0

    def to_json(self) -> dict:
        return asdict(self)


class NoiseCriterion:
    """Finished when (a) samples >= min_samples and their sum >= min_time_s and noise <= max_noise_pct
    ("noise target"), or (b) as (a) with the noise above the target but settled (nvbench's stdrel rule: the
    noise after every step, the last NOISE_HISTORY kept; with more than SETTLE_MIN_READINGS, every SETTLE_EVERY
    steps, their spread around the current noise under 5% of it: "noise settled", with a warning), or (c) the
    wall clock since construction reaches timeout_s ("timeout"), or (d) samples reach max_samples ("sample
    cap"). The same rules as batchsweep's NoiseCriterion (src/sweep/stopping.cpp). The clock (seconds,
    monotonic) is injectable for tests."""

    NOISE_HISTORY = 512
    SETTLE_MIN_READINGS = 64
    SETTLE_EVERY = 16
    SETTLED_SPREAD = 0.05

    def __init__(self, settings: StoppingSettings, clock: Optional[Callable[[], float]] = None):
        self._settings = settings
        self._clock = clock or time.monotonic
        self._start_s = self._clock()
        self._elapsed_at_stop_s = 0.0
        self._samples = 0
        self._measured_ms = 0.0
        self._mean_ms = 0.0  # Welford's running mean
        self._squares = 0.0  # and sum of squared deviations from it
        self._noise_history = deque()
        self._stop = ""

    def add_measurement(self, step_ms: float):
        self._samples += 1
        self._measured_ms += step_ms
        delta = step_ms - self._mean_ms
        self._mean_ms += delta / self._samples
        self._squares += delta * (step_ms - self._mean_ms)
        if self._samples >= 2:
            self._noise_history.append(self.noise_pct())
            if len(self._noise_history) > self.NOISE_HISTORY:
                self._noise_history.popleft()

    def noise_pct(self) -> float:
        if self._samples < 2 or self._mean_ms <= 0:
            return 0.0
        return math.sqrt(max(0.0, self._squares) / (self._samples - 1)) / self._mean_ms * 100.0

    @property
    def samples(self) -> int:
        return self._samples

    @property
    def measured_s(self) -> float:
        return self._measured_ms / 1000.0

    def _noise_settled(self) -> bool:
        history = self._noise_history
        if len(history) <= self.SETTLE_MIN_READINGS or self._samples % self.SETTLE_EVERY != 0 or history[-1] <= 0:
            return False
        current = history[-1]  # the spread around it, not the mean: a drifting noise stays unsettled
        spread = math.sqrt(sum((v - current) ** 2 for v in history) / (len(history) - 1))
        return spread / current < self.SETTLED_SPREAD

    def is_finished(self) -> bool:
        if self._stop:
            return True
        s = self._settings
        elapsed_s = self._clock() - self._start_s
        # One sample says nothing of the noise: the noise target needs two, whatever --min-samples says.
        if self._samples >= max(2, s.min_samples) and self._measured_ms >= s.min_time_s * 1000.0:
            noise = self.noise_pct()
            if noise <= s.max_noise_pct:
                self._stop = "noise target"
            elif self._noise_settled():
                self._stop = "noise settled"
        if not self._stop:
            if elapsed_s >= s.timeout_s:
                self._stop = "timeout"
            elif self._samples >= s.max_samples:
                self._stop = "sample cap"
        if self._stop:
            self._elapsed_at_stop_s = elapsed_s
        return bool(self._stop)

    def stop_reason(self) -> str:
        """"noise target", "noise settled", "timeout" or "sample cap"; empty while not finished."""
        return self._stop

    def warning(self) -> Optional[str]:
        """Which limit ended the point short of its targets, by how much, and the flag that helps; else None."""
        if self._stop in ("", "noise target"):
            return None
        s = self._settings
        noise = self.noise_pct()
        noisy = noise > s.max_noise_pct
        if self._stop == "noise settled":
            mean_pct = 1.96 * noise / math.sqrt(self._samples)
            return (f"noise settled at {noise:.1f}%, above the {s.max_noise_pct:g}% target, after {self._samples} "
                    f"timed steps: steps vary that much, and more of them would not lower it; the mean step is known "
                    f"to \u00b1{mean_pct:.2f}% (95% confidence, taking the steps as independent; compare allows "
                    f"for drift) (relax --max-noise to stop sooner)")
        missed = []
        if noisy:
            missed.append(f"noise {noise:.1f}% > {s.max_noise_pct:g}% target")
        if self._samples < 2:
            missed.append("noise unknown from one sample")
        if self._samples < s.min_samples:
            missed.append(f"{self._samples} sample{'' if self._samples == 1 else 's'} < {s.min_samples} minimum")
        short_time = self._measured_ms < s.min_time_s * 1000.0
        if short_time:
            missed.append(f"{self.measured_s:.2f} s measured < {s.min_time_s:g} s minimum")
        what = ", ".join(missed) if missed else "all targets met at the same moment"
        if self._stop == "timeout":
            hint = "raise --timeout or relax --max-noise" if noisy else "raise --timeout"
            return (f"timeout {s.timeout_s:g} s reached after {self._elapsed_at_stop_s:.1f} s with {what} "
                    f"({hint})")
        advice = ((["raise --max-samples or lower --min-time"] if s.max_samples < 100000 else ["lower --min-time"])
                  if short_time else []) + (["relax --max-noise"] if noisy else [])
        return f"sample cap {s.max_samples} reached with {what}" + (f" ({' or '.join(advice)})" if advice else "")
