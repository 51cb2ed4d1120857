"""Step-time statistics exactly as batchsweep computes them (src/analysis/stats.cpp): numpy's 'linear'
percentiles, the sample standard deviation (n - 1) and relative noise. Standard library only."""

import math
from dataclasses import asdict, dataclass


@dataclass
class StepStats:
    mean: float = 0.0
    median: float = 0.0
    stddev: float = 0.0
    min: float = 0.0
    max: float = 0.0
    p50: float = 0.0
    p90: float = 0.0
    p95: float = 0.0
    p99: float = 0.0

    def to_json(self, samples: int = 2) -> dict:
        """Without samples a 0 is a statistic nobody measured, and one sample has no spread to measure: null, as
        batchsweep writes them."""
        out = {k: (v if math.isfinite(v) and (samples > 0 or v != 0.0) else None) for k, v in asdict(self).items()}
        if samples == 1:
            out["stddev"] = None
        return out


def _require_finite(samples, what: str):
    for i, v in enumerate(samples):
        if not math.isfinite(v):
            raise ValueError(f"{what}: sample {i} is not finite ({v})")


def _lerp(a: float, b: float, t: float) -> float:
    # numpy's lerp: exact at both ends, and the same rounding as np.percentile(method="linear").
    diff = b - a
    return b - diff * (1.0 - t) if t >= 0.5 else a + diff * t


def _sorted_percentile(ordered: list, q: float) -> float:
    h = (len(ordered) - 1) * q / 100.0
    lo = math.floor(h)
    if lo + 1 >= len(ordered):
        return ordered[-1]
    return _lerp(ordered[lo], ordered[lo + 1], h - lo)


def percentile(samples, q: float) -> float:
    """The q-th percentile (q in [0, 100]), linear between closest ranks; 0 for no samples."""
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile: q must be in [0, 100], got {q}")
    _require_finite(samples, "percentile")
    if not samples:
        return 0.0
    return _sorted_percentile(sorted(samples), q)


def summarize(samples_ms) -> StepStats:
    """mean, median (= p50), sample stddev (0 for one sample), min, max, p50/p90/p95/p99; zeros when empty."""
    _require_finite(samples_ms, "summarize")
    stats = StepStats()
    if not samples_ms:
        return stats
    ordered = sorted(samples_ms)
    n = float(len(ordered))
    total = 0.0
    for v in ordered:  # left to right over the sorted samples, as std::accumulate does
        total += v
    stats.mean = total / n
    if len(ordered) > 1:
        sum_sq = 0.0
        for v in ordered:
            sum_sq += (v - stats.mean) * (v - stats.mean)
        stats.stddev = math.sqrt(sum_sq / (n - 1.0))
    stats.min, stats.max = ordered[0], ordered[-1]
    stats.p50 = _sorted_percentile(ordered, 50.0)
    stats.p90 = _sorted_percentile(ordered, 90.0)
    stats.p95 = _sorted_percentile(ordered, 95.0)
    stats.p99 = _sorted_percentile(ordered, 99.0)
    stats.median = stats.p50
    return stats


def relative_noise(samples) -> float:
    """stddev / mean as a fraction (0.01 = 1%); 0 for fewer than two samples or a zero mean."""
    if len(samples) < 2:
        return 0.0
    stats = summarize(samples)
    return stats.stddev / stats.mean if stats.mean > 0.0 else 0.0
