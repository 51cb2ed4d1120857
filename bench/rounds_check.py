#!/usr/bin/env python3
"""How often `batchsweep run --rounds 2` calls a point's rounds in disagreement, on the scripted device.

Each run sweeps --batch 1:4096:*8 (5 points) with --rounds 2 on a scripted roofline device whose steps vary by
--noise percent (and stall every --stall-every steps at 3x, if given), with a new script seed per run, and
counts the points whose report says rounds_disagree. Without --drift the rounds come from one distribution, so
every flag is a false alarm (the rule's level is 1% per point); with --drift PCT each prepare runs PCT% slower
than the one before, so the rounds truly differ and the count is the rule's power. Also prints the largest
pooled-step bias between batches (the drift --rounds is meant to spread evenly: 0 for an even number of rounds
of equal length).

Standard library only. Examples:
    python3 bench/rounds_check.py --runs 100 --noise 2
    python3 bench/rounds_check.py --runs 100 --noise 10
    python3 bench/rounds_check.py --runs 100 --noise 1 --stall-every 7
    python3 bench/rounds_check.py --runs 50 --noise 2 --drift 0.5
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile


def wilson(k, n, z=1.959963984540054):
    """95% Wilson score interval for k successes out of n."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default="build/batchsweep")
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--noise", type=float, default=2.0, help="step noise, percent")
    parser.add_argument("--stall-every", type=int, default=None)
    parser.add_argument("--drift", type=float, default=0.0, help="drift_pct: percent slower per prepare")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    flagged = points = 0
    worst_bias = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "device.json")
        report = os.path.join(tmp, "report.json")
        for seed in range(args.runs):
            device = {"name": "rounds-check", "memory_total_bytes": 80_000_000_000, "t0_ms": 2,
                      "samples_per_ms": 64, "noise_pct": args.noise, "drift_pct": args.drift, "seed": seed}
            if args.stall_every:
                device.update({"stall_every_steps": args.stall_every, "stall_factor": 3})
            with open(script, "w") as f:
                json.dump(device, f)
            done = subprocess.run([args.binary, "run", "--backend", "scripted", "--script", script, "--batch",
                                   "1:4096:*8", "--rounds", str(args.rounds), "--json", report, "--quiet",
                                   "--warmup", "1", "--min-time", "0.05"], capture_output=True, text=True)
            if done.returncode != 0:
                sys.exit(f"batchsweep exited {done.returncode}: {done.stderr}")
            with open(report) as f:
                doc = json.load(f)
            biases = []
            for p in doc["points"]:
                if "rounds_disagree" in p:
                    points += 1
                    flagged += bool(p["rounds_disagree"])
                formula = max(2.0, p["batch"] / 64)
                biases.append(p["step_ms"]["mean"] / formula)
            worst_bias = max(worst_bias, max(biases) / min(biases) - 1)
    low, high = wilson(flagged, points)
    print(f"noise {args.noise:g}%, stall every {args.stall_every or '-'}, drift {args.drift:g}%/prepare, "
          f"{args.rounds} rounds: {flagged}/{points} points flagged ({100 * flagged / max(points, 1):.2f}%, "
          f"95% CI {100 * low:.2f}-{100 * high:.2f}%); largest pooled-mean gap between batches "
          f"{100 * worst_bias:.2f}%")


if __name__ == "__main__":
    main()
