#!/usr/bin/env python3
"""A/A (and A/B power) simulation of `batchsweep compare --fail-on-regression`.

Synthesizes pairs of schema-v1 batchsweep reports whose points' step times are
drawn from the SAME distribution (different seeds), runs

    batchsweep compare A.json B.json --fail-on-regression PCT --json out.json

on each pair, and counts how often the gate fails (exit 3): the family-wise
false-positive rate of the gate over a sweep of K batches.  With --effect PCT,
run B's steps at ONE batch (the middle one) are made PCT% longer, and the
failure rate is the gate's detection rate (power) instead.

Step-time model, per batch b (powers of two, 1, 2, 4, ...):
    mean_ms(b) = base_ms * b ** exponent            (default 1 ms * b^0.8)
    step ~ lognormal with that mean and coefficient of variation CV
    optionally AR(1)-correlated in log space with parameter phi (the marginal
    distribution stays the same lognormal).

Standard library only.  Example:
    python3 compare_aa.py --mode train --batches 10 --steps 200 --cv 3 --pct 1 --pairs 200
"""

import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter

# --------------------------------------------------------------------------- stats


def wilson(k, n, z=1.959963984540054):
    """95% Wilson score interval for k successes out of n."""
    if n == 0:
        return (float("nan"), float("nan"))
    p = k / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return (max(0.0, centre - half), min(1.0, centre + half))


def quantile_linear(sorted_xs, q):
    """numpy's default (linear interpolation between closest ranks)."""
    n = len(sorted_xs)
    if n == 1:
        return sorted_xs[0]
    h = (n - 1) * q
    lo = int(math.floor(h))
    hi = min(lo + 1, n - 1)
    return sorted_xs[lo] + (h - lo) * (sorted_xs[hi] - sorted_xs[lo])


def step_stats(xs):
    s = sorted(xs)
    n = len(xs)
    mean = math.fsum(xs) / n
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1)) if n > 1 else None
    med = quantile_linear(s, 0.5)
    return {
        "mean": mean,
        "median": med,
        "stddev": sd,
        "min": s[0],
        "max": s[-1],
        "p50": med,
        "p90": quantile_linear(s, 0.90),
        "p95": quantile_linear(s, 0.95),
        "p99": quantile_linear(s, 0.99),
    }


# ----------------------------------------------------------------------- sampling


def draw_steps(rng, n, mean_ms, cv, phi):
    """n lognormal step times (ms) with the given mean and CV, AR(1) in log space."""
    sigma2 = math.log1p(cv * cv)
    sigma = math.sqrt(sigma2)
    mu = math.log(mean_ms) - sigma2 / 2
    innov = math.sqrt(max(0.0, 1 - phi * phi))
    z = rng.gauss(0.0, 1.0)  # stationary start
    out = []
    for i in range(n):
        if i > 0:
            z = phi * z + innov * rng.gauss(0.0, 1.0)
        out.append(math.exp(mu + sigma * z))
    return out


MODEL = {
    # A tiny resolved model, the same in every report so `compare` sees one model.
    "name": "aa-synthetic",
    "input": {"type": "vector", "features": 16},
    "layers": [{"type": "linear", "out_features": 4, "activation": "none", "bias": True, "repeat": 1}],
    "loss": "cross_entropy",
    "optimizer": {"type": "adamw", "learning_rate": 0.001, "beta1": 0.9, "beta2": 0.999,
                  "eps": 1e-08, "weight_decay": 0.01},
}


def make_report(args, batches, rng, run_seed, created_at, slow_batch=None, slow_factor=1.0):
    points = []
    max_noise = max(1.0, round(2 * args.cv, 3))  # a target these steps can meet ("noise target")
    for b in batches:
        mean_ms = args.base_ms * b ** args.exponent
        xs = draw_steps(rng, args.steps, mean_ms, args.cv / 100.0, args.phi)
        if b == slow_batch:
            xs = [x * slow_factor for x in xs]
            if args.stall:  # a stall in a random STALL% of the steps: the tail moves, the mean barely
                xs = [x * args.stall_factor if rng.random() < args.stall / 100.0 else x for x in xs]
        st = step_stats(xs)
        eff = b * 1
        sps = eff / (st["mean"] / 1000.0)
        p = {
            "batch": b,
            "accumulation": 1,
            "effective_batch": eff,
            "status": "ok",
            "reason": "",
            "samples_per_second": sps,
            "tokens_per_second": None,
            "step_ms": st,
            "samples_ms": xs,
            "tflops": None,
            "mfu": None,
            "memory": {"planned_bytes": None, "measured_bytes": None, "device_used_bytes": None},
            "refinement": False,
            "stop_reason": args.stop_reason,
        }
        if st["stddev"] is not None:
            p["noise_pct"] = st["stddev"] / st["mean"] * 100.0
        if args.mode == "train":
            p["loss"] = 1.0
        points.append(p)
    best = max(points, key=lambda p: p["samples_per_second"])
    choice_null = {"batch": None, "samples_per_second": None, "reason": "synthetic report"}
    return {
        "schema_version": 1,
        "tool": {"name": "compare_aa.py", "version": "1", "git_commit": None},
        "created_at": created_at,
        "command": ["compare_aa.py", "--synthetic", "seed=%d" % run_seed],
        "state": "complete",
        "device": {
            "backend": "scripted",
            "name": "aa-synthetic-device",
            "memory_total_bytes": None,
            "peak_flops": None,
            "peak_flops_source": None,
        },
        "settings": {
            "model": MODEL,
            "model_source": "synthetic",
            "backend": "scripted",
            "device": None,
            "mode": args.mode,
            "precision": "fp32",
            "accumulation": 1,
            "batch": ",".join(str(b) for b in batches),
            "effective_batch": None,
            "memory_limit_bytes": None,
            "memory_warn_fraction": 0.9,
            "stopping": {
                "warmup_steps": 3,
                "warmup_time_s": 0.0,
                "min_samples": args.steps,
                "min_time_s": 0.0,
                "max_noise_pct": max_noise,
                "timeout_s": 1e6,
                "max_samples": max(10000, args.steps),
            },
            "seed": run_seed,
            "cuda_graphs": None,
            "attention": "auto",
            "conv": "auto",
            "telemetry": "off",
            "knee_sensitivity": 1.0,
            "saturation_pct": 95.0,
            "latency_slo_ms": None,
            "latency_percentile": 99,
            "price_per_hour": None,
            "measured_points": len(points),
        },
        "points": points,
        # compare re-analyses every run from its points; this block only keeps the
        # document schema-complete.
        "analysis": {
            "knee": {"batch": None, "reason": "synthetic report", "confidence": "unknown",
                     "range_low": None, "range_high": None},
            "saturation": choice_null,
            "max_fit": choice_null,
            "best_throughput": {"batch": best["batch"], "samples_per_second": best["samples_per_second"],
                                "reason": "synthetic report"},
            "recommended": {"batch": None, "why": "synthetic report"},
        },
        "warnings": [],
    }


# ----------------------------------------------------------------------- main loop


def iso(t):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary",
                    default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build",
                                         "batchsweep"),
                    help="batchsweep binary (default: build/batchsweep in this repository)")
    ap.add_argument("--batches", type=int, default=10, help="K batches: 1, 2, 4, ..., 2^(K-1) (default 10)")
    ap.add_argument("--steps", type=int, default=200, help="timed steps per batch per run (default 200)")
    ap.add_argument("--cv", type=float, default=3.0, help="step-time coefficient of variation, percent (default 3)")
    ap.add_argument("--phi", type=float, default=0.0, help="AR(1) parameter of the log step times (default 0)")
    ap.add_argument("--mode", choices=["train", "infer"], default="train", help="settings.mode (infer gates the tail)")
    ap.add_argument("--pct", type=str, default="1", help="--fail-on-regression PCT (default 1)")
    ap.add_argument("--pairs", type=int, default=200, help="R pairs of runs (default 200)")
    ap.add_argument("--seed", type=int, default=1, help="master RNG seed (default 1)")
    ap.add_argument("--effect", type=float, default=0.0,
                    help="make run B's steps PCT%% longer at the middle batch: measures power (default 0: A/A)")
    ap.add_argument("--stall", type=float, default=0.0,
                    help="make a random STALL%% of run B's steps at the middle batch --stall-factor times as long "
                         "(a tail effect; measures the tail gate's power with --mode infer)")
    ap.add_argument("--stall-factor", type=float, default=1.5, help="a stall's length over a step's (default 1.5)")
    ap.add_argument("--extra", type=str, default="",
                    help="extra arguments appended to compare, one string split on whitespace; write it as "
                         "--extra='--fail-on-latency-regression off' since it starts with --")
    ap.add_argument("--base-ms", type=float, default=1.0, help="mean step time at batch 1, ms (default 1)")
    ap.add_argument("--exponent", type=float, default=0.8, help="mean_ms = base_ms * batch^exponent (default 0.8)")
    ap.add_argument("--stop-reason", default="noise target",
                    help="points' stop_reason (default 'noise target'; 'noise settled', 'timeout' or "
                         "'sample cap' mark them stopped short, which adds compare's drift-aware check)")
    ap.add_argument("--keep", metavar="DIR", default=None,
                    help="keep the reports and compare outputs of every pair in DIR")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds allowed per compare call (default 120)")
    ap.add_argument("--quiet", action="store_true", help="no progress line on stderr")
    args = ap.parse_args()

    if args.batches < 1 or args.steps < 2 or args.pairs < 1:
        ap.error("--batches >= 1, --steps >= 2 and --pairs >= 1 are needed")
    if not (-1.0 < args.phi < 1.0):
        ap.error("--phi must be in (-1, 1)")
    if args.cv <= 0:
        ap.error("--cv must be > 0")
    binary = os.path.abspath(args.binary)
    if not os.access(binary, os.X_OK):
        ap.error("binary not executable: %s" % binary)

    batches = [2 ** i for i in range(args.batches)]
    slow_batch = batches[len(batches) // 2] if args.effect or args.stall else None
    slow_factor = 1.0 + args.effect / 100.0
    extra = args.extra.split()

    workdir = args.keep or tempfile.mkdtemp(prefix="compare_aa.")
    os.makedirs(workdir, exist_ok=True)
    master = random.Random(args.seed)
    base_t = time.time()

    gate_fail = 0
    exit_codes = Counter()
    rows_total = 0
    thr = Counter()     # verdict counts over rows
    tail = Counter()    # tail_verdict counts over rows
    tail_few = 0
    flags = Counter()   # verdict-rule flags over rows
    slow_rows = Counter()  # power: verdicts at the slowed batch
    slow_tail = Counter()
    finding_kinds = Counter()
    pairs_with_kind = Counter()
    fail_batches = Counter()  # batch -> pairs failing there
    slow_batch_detect = 0  # power: pairs with a finding at the slowed batch
    errors = []
    t0 = time.time()

    for r in range(args.pairs):
        seed_a = master.getrandbits(31)
        seed_b = master.getrandbits(31)
        ra = make_report(args, batches, random.Random(seed_a), seed_a, iso(base_t + 2 * r))
        rb = make_report(args, batches, random.Random(seed_b), seed_b, iso(base_t + 2 * r + 1),
                         slow_batch, slow_factor)
        pa = os.path.join(workdir, "pair%04d_A.json" % r if args.keep else "A.json")
        pb = os.path.join(workdir, "pair%04d_B.json" % r if args.keep else "B.json")
        po = os.path.join(workdir, "pair%04d_cmp.json" % r if args.keep else "cmp.json")
        with open(pa, "w") as f:
            json.dump(ra, f)
        with open(pb, "w") as f:
            json.dump(rb, f)
        if os.path.exists(po):
            os.remove(po)
        cmd = [binary, "compare", pa, pb, "--fail-on-regression", args.pct, "--json", po] + extra
        try:
            cp = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                timeout=args.timeout, universal_newlines=True)
            rc = cp.returncode
            err = cp.stderr
        except subprocess.TimeoutExpired:
            rc, err = "timeout", ""
        exit_codes[rc] += 1
        if rc not in (0, 3):
            errors.append((r, rc, err.strip().splitlines()[-3:] if err else []))
            if len(errors) >= 3 and not gate_fail and r < 5:
                break  # the reports are being refused; stop early
            continue
        if rc == 3:
            gate_fail += 1
        try:
            with open(po) as f:
                out = json.load(f)
        except (OSError, ValueError) as e:
            errors.append((r, "json", [str(e)]))
            continue
        for row in out.get("rows", []):
            for d in row.get("deltas", []):
                if d.get("label") == "A":
                    continue
                if slow_batch is not None and row.get("batch") == slow_batch:
                    slow_rows[d.get("verdict")] += 1
                    slow_tail[d.get("tail_verdict")] += 1
                    continue  # per-row false rates cover the unchanged batches only
                rows_total += 1
                thr[d.get("verdict")] += 1
                tail[d.get("tail_verdict")] += 1
                if d.get("tail_few_steps"):
                    tail_few += 1
                for flag in ("under_min_effect", "short_within_noise", "median_and_mean_disagree", "from_mean"):
                    if d.get(flag):
                        flags[flag] += 1
        gate = out.get("gate") or {}
        kinds_here = set()
        hit_slow = False
        for fnd in gate.get("findings", []):
            finding_kinds[fnd.get("kind")] += 1
            kinds_here.add(fnd.get("kind"))
            fail_batches[fnd.get("batch")] += 1
            if slow_batch is not None and fnd.get("batch") == slow_batch:
                hit_slow = True
        for k in kinds_here:
            pairs_with_kind[k] += 1
        if hit_slow:
            slow_batch_detect += 1
        if not args.quiet and (r + 1) % 25 == 0:
            sys.stderr.write("\r%d/%d pairs, %d gate failures, %.0fs" % (r + 1, args.pairs, gate_fail, time.time() - t0))
            sys.stderr.flush()
    if not args.quiet:
        sys.stderr.write("\n")
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)

    judged = exit_codes[0] + exit_codes[3]
    what = "POWER (detection rate)" if args.effect or args.stall else "A/A false-positive rate"
    print("== batchsweep compare gate: %s ==" % what)
    print("options: mode=%s batches=%d (%s..%s) steps=%d cv=%g%% phi=%g pct=%s pairs=%d seed=%d "
          "mean_ms=%g*b^%g stop_reason=%r%s%s" % (
              args.mode, args.batches, batches[0], batches[-1], args.steps, args.cv, args.phi, args.pct,
              args.pairs, args.seed, args.base_ms, args.exponent, args.stop_reason,
              (" effect=+%g%% step time, stalls %g%% x%g at batch %d" % (
                  args.effect, args.stall, args.stall_factor, slow_batch)) if slow_batch is not None else "",
              (" extra=%r" % args.extra) if args.extra else ""))
    print("exit codes: %s" % dict(sorted(exit_codes.items(), key=lambda kv: str(kv[0]))))
    if judged:
        lo, hi = wilson(gate_fail, judged)
        print("gate failed (exit 3): %d/%d = %.2f%%  [95%% Wilson %.2f%%, %.2f%%]" % (
            gate_fail, judged, 100.0 * gate_fail / judged, 100 * lo, 100 * hi))
        if slow_batch is not None:
            lo, hi = wilson(slow_batch_detect, judged)
            print("  with a finding at the slowed batch %d: %d/%d = %.2f%%  [%.2f%%, %.2f%%]" % (
                slow_batch, slow_batch_detect, judged, 100.0 * slow_batch_detect / judged, 100 * lo, 100 * hi))
    n_slow = sum(slow_rows.values())
    if n_slow:
        lo, hi = wilson(slow_rows["slower"], n_slow)
        print("slowed batch %d: throughput verdict slower %d/%d = %.2f%%  [%.2f%%, %.2f%%]; tail verdicts %s" % (
            slow_batch, slow_rows["slower"], n_slow, 100.0 * slow_rows["slower"] / n_slow, 100 * lo, 100 * hi,
            dict(slow_tail)))
    if rows_total:
        if slow_batch is not None:
            print("(per-row rates below: the %d unchanged batches only)" % (len(batches) - 1))
        for name, c in (("throughput verdict", thr), ("tail verdict", tail)):
            ch = c["slower"] + c["faster"]
            lo, hi = wilson(ch, rows_total)
            print("per-row %s changed: %d/%d = %.3f%%  [%.3f%%, %.3f%%]  (slower %d, faster %d)" % (
                name, ch, rows_total, 100.0 * ch / rows_total, 100 * lo, 100 * hi, c["slower"], c["faster"]))
        print("  (each batch is drawn independently, so rows are independent trials)")
        print("rows with tail_few_steps (tail not judged): %d/%d" % (tail_few, rows_total))
        if flags:
            print("row flags: %s" % ", ".join("%s %d" % kv for kv in sorted(flags.items())))
    if finding_kinds:
        print("gate findings by kind (count; pairs): %s" % ", ".join(
            "%s %d; %d" % (k, finding_kinds[k], pairs_with_kind[k]) for k in sorted(finding_kinds, key=str)))
        print("findings by batch: %s" % ", ".join("%s:%d" % (b, n) for b, n in sorted(fail_batches.items(),
                                                                                    key=lambda kv: (kv[0] is None, kv[0]))))
    else:
        print("gate findings: none")
    if errors:
        print("compare errors (first 3): ")
        for r, rc, lines in errors[:3]:
            print("  pair %d rc=%s: %s" % (r, rc, " | ".join(lines)))
    print("elapsed %.1fs" % (time.time() - t0))
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
