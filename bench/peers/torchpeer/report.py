"""The batchsweep report (schema v1, configs/schema/report-v1.schema.json; include/batchsweep/report.hpp) as the
peer writes it: one Point per measured batch, the device, the settings, and an analysis left for
`batchsweep analyze` to compute. Written atomically after every point. Standard library only."""

import datetime
import json
import math
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Optional

from . import PEER_NAME
from .config import repo_root
from .errors import InputError
from .stats import StepStats, relative_noise, summarize

SCHEMA_VERSION = 1
PEER_VERSION = "0.1.0"
STATUSES = ("ok", "oom", "over_limit", "error")
ANALYSIS_NOTE = "not computed by the PyTorch peer: `batchsweep analyze REPORT` computes it"


def _number_or_null(v: Optional[float]):
    return v if v is not None and math.isfinite(v) else None


@dataclass
class Point:
    """One measured batch, with the fields of bsw::Point."""

    batch: int
    accumulation: int = 1
    status: str = "ok"
    reason: str = ""
    samples_ms: list = field(default_factory=list)
    samples_per_second: float = 0.0
    tokens_per_second: Optional[float] = None
    step_ms: StepStats = field(default_factory=StepStats)
    tflops: Optional[float] = None
    mfu: Optional[float] = None
    planned_bytes: int = 0  # the peer plans nothing; batchsweep's plan is in its own report
    measured_bytes: Optional[int] = None  # torch.cuda.max_memory_allocated over the point; None on the CPU
    device_used_bytes: Optional[int] = None  # drop of cudaMemGetInfo's free memory over the point
    noise_pct: Optional[float] = None
    stop_reason: str = ""
    skipped_steps: Optional[int] = None
    loss: Optional[float] = None

    @property
    def effective_batch(self) -> int:
        return self.batch * self.accumulation

    def finish(self, flops_per_step: float, tokens_per_sample: int, peak_flops: Optional[float]):
        """Fills the statistics and rates from samples_ms, as batchsweep's runner does: throughput from the mean
        step time (total samples over total time), rates only for ok points."""
        if self.samples_ms:
            self.step_ms = summarize(self.samples_ms)
            # One sample has no spread: its noise is unknown (None), not 0%.
            self.noise_pct = relative_noise(self.samples_ms) * 100.0 if len(self.samples_ms) >= 2 else None
        mean_s = self.step_ms.mean / 1000.0
        if self.status == "ok" and not mean_s > 0:
            # As batchsweep's runner: a step the clock could not resolve has no throughput to report.
            self.status = "error"
            self.reason = "the timer measured 0 ms for every step: too short to time"
        if self.status != "ok":
            return
        self.samples_per_second = self.effective_batch / mean_s
        if tokens_per_sample > 0:
            self.tokens_per_second = self.samples_per_second * tokens_per_sample
        flops_per_second = flops_per_step / mean_s
        self.tflops = flops_per_second / 1e12
        if peak_flops and peak_flops > 0:
            self.mfu = flops_per_second / peak_flops

    def to_json(self) -> dict:
        if self.status not in STATUSES:
            raise ValueError(f"point status must be one of {STATUSES}, got {self.status!r}")
        out = {
            "batch": self.batch,
            "accumulation": self.accumulation,
            "effective_batch": self.effective_batch,
            "status": self.status,
            "reason": self.reason,
            # A failed point has no throughput (not a throughput of 0).
            "samples_per_second": _number_or_null(self.samples_per_second) if self.status == "ok" else None,
            "tokens_per_second": _number_or_null(self.tokens_per_second),
            "step_ms": self.step_ms.to_json(samples=len(self.samples_ms)),
            "samples_ms": [_number_or_null(v) for v in self.samples_ms],
            "tflops": _number_or_null(self.tflops),
            "mfu": _number_or_null(self.mfu),
            "memory": {
                "planned_bytes": int(self.planned_bytes) if self.planned_bytes > 0 else None,
                "measured_bytes": None if self.measured_bytes is None else int(self.measured_bytes),
                "device_used_bytes": None if self.device_used_bytes is None else int(self.device_used_bytes),
            },
            "refinement": False,
        }
        if self.noise_pct is not None:
            out["noise_pct"] = _number_or_null(self.noise_pct)
        if self.stop_reason:
            out["stop_reason"] = self.stop_reason
        if self.skipped_steps is not None:
            out["skipped_steps"] = int(self.skipped_steps)
        if self.loss is not None:
            out["loss"] = _number_or_null(self.loss)
        return out


def empty_analysis() -> dict:
    """The smallest analysis schema v1 accepts; every choice says that `batchsweep analyze` computes it."""
    choice = {"batch": None, "samples_per_second": None, "reason": ANALYSIS_NOTE}
    return {
        "knee": {"batch": None, "reason": ANALYSIS_NOTE, "confidence": "", "range_low": None, "range_high": None},
        "saturation": dict(choice),
        "max_fit": dict(choice),
        "best_throughput": dict(choice),
        "recommended": {"batch": None, "why": ANALYSIS_NOTE},
    }


def git_commit(root: Optional[str] = None) -> str:
    """`git rev-parse --short=12 HEAD` of the checkout (as cmake/GitCommit.cmake), or "unknown"."""
    try:
        done = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root or repo_root(),
                              capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and commit else "unknown"


def now_iso8601() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _without_non_finite(doc):
    if isinstance(doc, float):
        return _number_or_null(doc)
    if isinstance(doc, dict):
        return {str(k): _without_non_finite(v) for k, v in doc.items()}
    if isinstance(doc, (list, tuple)):
        return [_without_non_finite(v) for v in doc]
    return doc


@dataclass
class Report:
    command: list
    device: dict  # backend, name, memory_total_bytes, peak_flops, peak_flops_source, + details
    settings: dict
    points: list = field(default_factory=list)  # of Point, kept sorted by (effective_batch, batch)
    warnings: list = field(default_factory=list)
    created_at: str = field(default_factory=now_iso8601)
    commit: str = field(default_factory=git_commit)
    # As batchsweep's: "in_progress" in the rewrites while the sweep runs, then "complete" or "interrupted".
    state: str = "in_progress"

    def add(self, point: Point):
        self.points.append(point)
        self.points.sort(key=lambda p: (p.effective_batch, p.batch))

    def to_json(self) -> dict:
        for key in ("backend", "name", "memory_total_bytes", "peak_flops", "peak_flops_source"):
            if key not in self.device:
                raise ValueError(f"device is missing '{key}'")
        return {
            "schema_version": SCHEMA_VERSION,
            "tool": {"name": PEER_NAME, "version": PEER_VERSION, "git_commit": self.commit},
            "created_at": self.created_at,
            "command": [str(a) for a in self.command],
            "state": self.state,
            "device": _without_non_finite(self.device),
            "settings": _without_non_finite(self.settings),
            "points": [p.to_json() for p in self.points],
            "analysis": empty_analysis(),
            "warnings": list(self.warnings),
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, allow_nan=False) + "\n"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_file_atomic(path: str, content: str):
    """Writes a temporary file beside `path`, fsyncs it and renames it over `path`, so a reader never sees a
    partial report; "-" is stdout. Raises InputError naming the path."""
    if path == "-":
        sys.stdout.write(content)
        sys.stdout.flush()
        return
    # A device or a FIFO (/dev/null, /dev/stdout, a pipe's name) is written into, not renamed over: as root the
    # rename would replace /dev/null with a file. A symlink's target is the file rewritten.
    path = os.path.realpath(path) if os.path.islink(path) else path
    if os.path.exists(path) and not os.path.isfile(path):
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write(content)
        except OSError as e:
            raise InputError(f"--json {path}: cannot write: {e.strerror or e}") from None
        return
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp.", dir=folder)
    except OSError as e:
        raise InputError(f"--json {path}: cannot write in {folder}: {e.strerror or e}") from None
    try:
        # mkstemp makes it 0600; a report is as readable as any file this process creates (0666 less the
        # umask), or keeps the mode of the report it replaces.
        mode = os.stat(path).st_mode & 0o777 if os.path.isfile(path) else 0o666 & ~_umask()
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(content)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise InputError(f"--json {path}: cannot write: {e.strerror or e}") from None


def check_writable(path: str, flag: str = "--json"):
    """Fails before any measurement when `path` cannot be written (exit 2 naming the flag)."""
    if not path or path == "-":
        return
    if os.path.isdir(path):
        raise InputError(f"{flag} {path}: is a directory")
    path = os.path.realpath(path) if os.path.islink(path) else path
    if os.path.exists(path) and not os.path.isfile(path):  # a device or FIFO: written into (write_file_atomic)
        if not os.access(path, os.W_OK):
            raise InputError(f"{flag} {path}: is not writable")
        return
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise InputError(f"{flag} {path}: the directory {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise InputError(f"{flag} {path}: the directory {folder} is not writable")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise InputError(f"{flag} {path}: the file is not writable")
