#!/usr/bin/env python3
"""Does a report's samples_per_second_ci95_pct hold across reruns of the same sweep?

Runs the same real sweep (CPU backend by default) N times, one after another,
and for every batch and every pair of runs asks whether the two runs'
throughputs differ by more than their intervals allow:

    |a - b| / mean(a, b) * 100 > sqrt(ci_a^2 + ci_b^2)

(the README: "two runs' means differ by up to about sqrt(2) times it").  With
intervals that cover the rerun-to-rerun spread, about 5% of pairs exceed it; a
share far above that says the intervals are narrower than what a rerun sees.
It also prints, per batch, the spread of the N means (standard deviation in %)
against the median reported half-width divided by 1.96 (what that standard
deviation would be were the intervals exact).

Run it on an idle machine: a busy one moves the throughput between runs, and
the runs' points are flagged busy (which this script counts).  Standard library
only.  Example:

    python3 bench/ci_calibration.py --binary build/batchsweep --runs 12 \\
        -- --backend cpu --model mlp --batch 16,64,256,1024 --min-time 1
"""

import argparse
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default="build/batchsweep")
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--keep", help="a directory to keep the reports in")
    parser.add_argument("sweep", nargs=argparse.REMAINDER, help="after --: the run's arguments")
    args = parser.parse_args()
    sweep = args.sweep[1:] if args.sweep[:1] == ["--"] else args.sweep
    sweep = sweep or ["--backend", "cpu", "--model", "mlp", "--batch",
                                                    "16,64,256,1024", "--min-time", "1"]
    out_dir = args.keep or tempfile.mkdtemp(prefix="bsw_ci_")
    os.makedirs(out_dir, exist_ok=True)
    runs = []
    for i in range(args.runs):
        path = os.path.join(out_dir, f"run{i:02d}.json")
        # 3 and 4 are answers (a regression, nothing to recommend), not failures: the report is whole.
        done = subprocess.run([args.binary, "run", *sweep, "--quiet", "--json", path], stdout=subprocess.DEVNULL)
        if done.returncode not in (0, 3, 4):
            sys.exit(f"run {i + 1} failed (exit {done.returncode})")
        with open(path) as f:
            runs.append(json.load(f))
        print(f"run {i + 1}/{args.runs} done", file=sys.stderr)

    by_batch = {}
    busy = 0
    for report in runs:
        busy += any("competed for the CPUs" in str(w) for w in report.get("warnings", []))
        for p in report["points"]:
            if p.get("status") != "ok" or "samples_per_second_ci95_pct" not in p:
                continue
            by_batch.setdefault(p["batch"], []).append((p["samples_per_second"], p["samples_per_second_ci95_pct"]))

    print(f"{'batch':>6} {'runs':>4} {'spread sd %':>11} {'ci95/1.96 %':>11} {'ratio':>6} {'pairs over':>10}")
    total_pairs = total_over = 0
    for batch in sorted(by_batch):
        values = by_batch[batch]
        rates = [r for r, _ in values]
        mean_rate = statistics.fmean(rates)
        sd_pct = statistics.stdev(rates) / mean_rate * 100 if len(rates) > 1 else float("nan")
        implied_sd = statistics.median(ci for _, ci in values) / 1.96
        over = pairs = 0
        for (ra, ca), (rb, cb) in itertools.combinations(values, 2):
            pairs += 1
            over += abs(ra - rb) / ((ra + rb) / 2) * 100 > math.hypot(ca, cb)
        total_pairs += pairs
        total_over += over
        print(f"{batch:>6} {len(values):>4} {sd_pct:>11.2f} {implied_sd:>11.2f} "
              f"{sd_pct / implied_sd if implied_sd > 0 else float('nan'):>6.2f} "
              f"{over:>4}/{pairs:<5}")
    share = total_over / total_pairs * 100 if total_pairs else float("nan")
    print(f"pairs whose difference exceeds sqrt(ci_a^2 + ci_b^2): {total_over}/{total_pairs} ({share:.1f}%; "
          f"about 5% if the intervals cover a rerun)")
    print(f"runs with a busy-host warning: {busy} of {len(runs)}")
    print(f"reports in {out_dir}")


if __name__ == "__main__":
    main()
