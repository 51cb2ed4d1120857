#!/usr/bin/env python3
"""A/B the step time of two batchsweep binaries on one point, in the same run: they take turns (A then B, then
B then A, ...) so the host's drift falls on both, and the answer is the ratio of their medians over the rounds, with each
side's spread. For a change that should move a step (README: performance claims are same-run ratios).

  bench/ab_step.py --a old/batchsweep --b build/batchsweep --model resnet-small --mode infer --batch 16
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile


def mean_step_ms(binary, args, path):
    cmd = [binary, "run", "--backend", args.backend, "--model", args.model, "--mode", args.mode, "--precision", args.precision,
           "--batch", str(args.batch), "--min-time", str(args.min_time), "--max-noise", "100", "--json", path, "-q"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    point = json.load(open(path))["points"][0]
    if point["status"] != "ok":
        sys.exit(f"{binary}: batch {args.batch} is {point['status']}: {point.get('reason')}")
    return point["step_ms"]["mean"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--a", required=True, help="the baseline binary")
    parser.add_argument("--b", required=True, help="the changed binary")
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--model", default="resnet-small")
    parser.add_argument("--mode", default="infer", choices=["train", "infer"])
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--min-time", type=float, default=1.0, help="seconds timed per point (each side, each round)")
    args = parser.parse_args()
    times = {"a": [], "b": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for side in ("a", "b") if r % 2 == 0 else ("b", "a"):
                times[side].append(mean_step_ms(getattr(args, side), args, f"{tmp}/{side}.json"))
    a, b = statistics.median(times["a"]), statistics.median(times["b"])
    spread = lambda t: (max(t) - min(t)) / statistics.median(t) * 100
    print(f"{args.model} {args.mode} {args.precision} batch {args.batch}, {args.rounds} rounds: "
          f"A median {a:.4g} ms (spread {spread(times['a']):.1f}%), B median {b:.4g} ms "
          f"(spread {spread(times['b']):.1f}%); B/A step time {b / a:.3f}")


if __name__ == "__main__":
    main()
