#!/usr/bin/env python3
"""What `--checkpointing` costs and saves: the same training sweep with and without it, in one run.

For each model, runs `batchsweep run --rounds 2` over --batch twice, once keeping every activation and once
with --checkpointing, the two sweeps alternating model by model so both see the same machine state. Prints per
batch the planned memory of each (and their ratio) and the throughput of each (and their ratio), plus what the
plan says the recomputation adds in FLOPs (about a quarter of a transformer's training FLOPs, a third of a
ResNet's). With --checkpoint-blocks N a third sweep checkpoints only the first N blocks, for what checkpointing
some of them costs and saves beside all of them. Ratios, not absolute figures, are what carries across machines, and a GPU's are measured on the card
itself (`--backend cuda`).

Standard library only. Examples:
    python3 bench/checkpointing.py
    python3 bench/checkpointing.py --models tiny-lm --batch 8,32 --backend cpu
    python3 bench/checkpointing.py --models gpt2-small --batch 4:64:*2 --backend cuda --precision bf16
    python3 bench/checkpointing.py --models tiny-lm --set 'layers[1].repeat=4' --checkpoint-blocks 2
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile


def model_flags(model, args):
    flags = ["--model", model]
    for s in args.set:
        flags += ["--set", s]
    return flags


def sweep(binary, model, args, checkpointing, path, blocks=None):
    cmd = [binary, "run", *model_flags(model, args), "--backend", args.backend, "--precision", args.precision,
           "--batch", args.batch, "--rounds", "2", "--min-time", str(args.min_time), "--max-noise", "2",
           "--quiet", "--json", path]
    if blocks:
        cmd += ["--checkpoint-blocks", str(blocks)]
    elif checkpointing:
        cmd.append("--checkpointing")
    done = subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=None if args.verbose else subprocess.PIPE,
                          text=True)
    if not args.verbose and "competed for the CPUs" in (done.stderr or ""):
        print(f"  ({model}{' --checkpointing' if checkpointing else ''}: other processes competed for the CPUs; "
              "--verbose shows the run's warnings)")
    with open(path) as f:
        return json.load(f)


def recompute_share(binary, model, args, blocks=None):
    flag = ["--checkpoint-blocks", str(blocks)] if blocks else ["--checkpointing"]
    out = subprocess.run([binary, "plan", *model_flags(model, args), "--backend", args.backend, "--precision",
                          args.precision, "--batch", "1", *flag, "--json", "-"],
                         check=True, capture_output=True, text=True).stdout
    doc = json.loads(out)
    point = doc["points"][0]
    return point["recompute_flops_per_step"] / point["flops_per_step"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default=os.path.join(os.path.dirname(__file__), "..", "build", "batchsweep"))
    parser.add_argument("--models", default="tiny-lm,resnet-small")
    parser.add_argument("--batch", default="8,32,128")
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--min-time", type=float, default=0.5)
    parser.add_argument("--set", action="append", default=[], metavar="PATH=VALUE",
                        help="batchsweep's --set, for every model (repeatable)")
    parser.add_argument("--checkpoint-blocks", type=int, default=None, metavar="N",
                        help="also sweep with only the first N blocks checkpointed")
    parser.add_argument("--verbose", action="store_true", help="show each run's warnings")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        n = args.checkpoint_blocks
        print(f"{'model':<14}{'batch':>6}{'planned MiB':>14}{'ckpt MiB':>10}{'mem ratio':>10}"
              f"{'samples/s':>11}{'ckpt':>9}{'thr ratio':>10}{'recompute':>11}")
        for model in args.models.split(","):
            share = recompute_share(args.binary, model, args)
            plain = sweep(args.binary, model, args, False, os.path.join(tmp, "plain.json"))
            ckpt = sweep(args.binary, model, args, True, os.path.join(tmp, "ckpt.json"))
            some = sweep(args.binary, model, args, True, os.path.join(tmp, "some.json"), n) if n else None
            some_share = recompute_share(args.binary, model, args, n) if n else None
            some_by_batch = {p["batch"]: p for p in some["points"]} if some else {}
            by_batch = {p["batch"]: p for p in ckpt["points"]}
            for p in plain["points"]:
                q = by_batch.get(p["batch"])
                if q is None or p["status"] != "ok" or q["status"] != "ok":
                    print(f"{model:<14}{p['batch']:>6}  (not ok: {p['status']} / {q['status'] if q else 'absent'})")
                    continue
                mib = 1 << 20
                a, b = p["memory"]["planned_bytes"], q["memory"]["planned_bytes"]
                ta, tb = p["samples_per_second"], q["samples_per_second"]
                print(f"{model:<14}{p['batch']:>6}{a / mib:>14.1f}{b / mib:>10.1f}{b / a:>10.3f}"
                      f"{ta:>11.1f}{tb:>9.1f}{tb / ta:>10.3f}{share:>10.1%}")
                r = some_by_batch.get(p["batch"])
                if r is not None and r["status"] == "ok":
                    c, tc = r["memory"]["planned_bytes"], r["samples_per_second"]
                    # Under the ckpt columns: planned MiB, its ratio, samples/s, its ratio, recompute share.
                    print(f"{'  first ' + str(n) + ' blocks':<20}{'':>14}{c / mib:>10.1f}{c / a:>10.3f}{'':>11}"
                          f"{tc:>9.1f}{tc / ta:>10.3f}{some_share:>10.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
