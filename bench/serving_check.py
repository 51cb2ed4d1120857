#!/usr/bin/env python3
"""`batchsweep analyze --request-rate` against queueing theory where it has a closed form.

Writes small hand-made inference reports, runs `batchsweep analyze` on each with a rate, and compares the
simulated request latency (analysis.serving) with:
  - M/G/1 (max batch 1): the Pollaczek-Khinchine mean time in system, E[S] + rate E[S^2] / (2 (1 - rho)), from
    the very step samples the report holds (so exact for what the simulation draws from), at several loads,
    with constant steps (M/D/1) and exponential ones (M/M/1, whose p99 is also known: ln(100) / (mu - rate));
  - a batch held until full (max batch B, an unbounded --max-queue-delay): a request waits for the rest of its
    batch, (B - 1) / (2 rate) on average, then the step;
  - a hold that never fills (a very low rate): every request waits --max-queue-delay, then the step.
For each case it prints the simulated mean with its standard error (latency_mean_se_ms), the theory, the
difference in standard errors, and whether the row is `settled`. A settled row more than 3 standard errors from
the theory would be a fault; near capacity the rows are unsettled, and read low, as the README says.

With --seeds N it measures instead how well the percentile's `±` (latency_se_ms) covers where no theory has the
answer: steps that stall (every 100th step 8 times as long), and lognormal ones, at p99 and p99.9, simulated N
times with BATCHSWEEP_SERVING_SEED 0..N-1. Per max batch: the spread (standard deviation) of the percentile
over the seeds, the median `±`, and how often the seed's figure lies within twice its `±` of the seeds' median
(about 95% where `±` is right).

Standard library only. Example:
    python3 bench/serving_check.py --binary build/batchsweep
"""

import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile


def report(points):
    return {"schema_version": 1, "settings": {"mode": "infer"}, "points": points}


def point(batch, samples_ms):
    mean = sum(samples_ms) / len(samples_ms)
    return {"batch": batch, "status": "ok", "samples_per_second": batch / mean * 1000.0, "samples_ms": samples_ms}


def serve_rows(binary, doc, rate, delay=0.0, pct=None, seed=0):
    """Every row of analyze's serving table at this rate, with the simulation's seeds moved by `seed`."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "r.json")
        with open(path, "w") as f:
            json.dump(doc, f)
        args = [binary, "analyze", path, "--request-rate", repr(rate), "--max-queue-delay", repr(delay),
                "--json", "-"]
        if pct is not None:
            args += ["--latency-percentile", str(pct)]
        env = dict(os.environ, BATCHSWEEP_SERVING_SEED=str(seed))
        out = subprocess.run(args, capture_output=True, text=True, env=env)
        if out.returncode not in (0, 4):
            sys.exit(f"batchsweep analyze failed ({out.returncode}): {out.stderr}")
        return json.loads(out.stdout)["analysis"]["serving"]["batches"]


def serve(binary, doc, rate, delay=0.0, pct=None):
    """The first row (the smallest max batch) of analyze's serving table, at the default seed."""
    return serve_rows(binary, doc, rate, delay, pct)[0]


def coverage(binary, seeds, rng):
    """How well latency_se_ms covers the percentile's spread over seeds (see the module's doc)."""
    def pool(kind, batch):
        base = 0.2 + 0.01 * batch
        if kind == "lognormal":
            return [base * rng.lognormvariate(0, 0.3) for _ in range(300)]
        steps = [base * (1 + rng.gauss(0, 0.02)) for _ in range(300)]
        for i in range(0, 300, 100):
            steps[i] = base * 8
        return steps

    print(f"{'steps':<10} {'pct':>5} {'max batch':>9} {'spread':>9} {'median ±':>9} {'within 2±':>9}")
    for kind in ("stalls", "lognormal"):
        doc = report([point(b, pool(kind, b)) for b in (1, 2, 4, 8, 16, 32, 64)])
        for pct in (99, 99.9):
            figures = {}
            for seed in range(seeds):
                for got in serve_rows(binary, doc, 20000.0, pct=pct, seed=seed):
                    value = (got.get("latency_ms") or {}).get(f"p{pct:g}")
                    if value is not None and got.get("latency_se_ms"):
                        figures.setdefault(got["batch"], []).append((value, got["latency_se_ms"]))
            for batch, got in sorted(figures.items()):
                values = sorted(v for v, _ in got)
                median = values[len(values) // 2]
                mean = sum(values) / len(values)
                spread = math.sqrt(sum((v - mean) ** 2 for v in values) / max(len(values) - 1, 1))
                errors = sorted(se for _, se in got)
                within = sum(abs(v - median) <= 2 * se for v, se in got) / len(got)
                print(f"{kind:<10} {'p%g' % pct:>5} {batch:>9} {spread:9.3g} {errors[len(errors) // 2]:9.3g} "
                      f"{within:9.0%}")


def row(name, got, theory, what="mean"):
    latency = got.get("latency_ms") or {}
    value = latency.get(what)
    se = got.get("latency_mean_se_ms") if what == "mean" else got.get("latency_se_ms")
    if value is None:
        print(f"{name:<44} {'saturated' if got['saturated'] else '-':>10}")
        return
    z = (value - theory) / se if se else (0.0 if value == theory else float("inf"))
    print(f"{name:<44} {what:>5} {value:10.4g} ±{se or 0:<8.3g} {theory:10.4g} {z:+7.1f}  "
          f"{'settled' if got['settled'] else 'UNSETTLED'}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default="build/batchsweep")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--seeds", type=int, default=0,
                        help="measure the percentile's error's coverage over this many simulation seeds")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    if args.seeds:
        coverage(args.binary, args.seeds, rng)
        return
    print(f"{'case':<44} {'what':>5} {'simulated':>10} {'± se':<9} {'theory':>10} {'z':>7}  row")

    constant = [1.0] * 10
    exponential = [rng.expovariate(1.0) for _ in range(5000)]
    for label, samples in (("M/D/1", constant), ("M/M/1", exponential)):
        es = sum(samples) / len(samples)
        es2 = sum(s * s for s in samples) / len(samples)
        for load in (0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.99):
            rate = load / es * 1000.0  # per second; steps in ms
            got = serve(args.binary, report([point(1, samples)]), rate)
            lam = rate / 1000.0
            row(f"{label} at {load:.0%} load", got, es + lam * es2 / (2 * (1 - load)))
            if label == "M/M/1" and load in (0.5, 0.8):
                got99 = serve(args.binary, report([point(1, samples)]), rate, pct=99)
                row(f"{label} at {load:.0%} load", got99, math.log(100) / (1 / es - lam), "p99")

    for batch, rate, step in ((4, 1000.0, 0.1), (16, 1000.0, 1.0), (64, 5000.0, 2.0)):
        got = serve(args.binary, report([point(batch, [step] * 10)]), rate, delay=1e9)
        row(f"max batch {batch} held until full, {rate:g}/s", got, (batch - 1) / (2 * rate / 1000.0) + step)

    got = serve(args.binary, report([point(8, [1.0] * 10)]), 10.0, delay=5.0)
    row("max batch 8, 10/s, held 5 ms", got, 6.0, "p50")


if __name__ == "__main__":
    main()
