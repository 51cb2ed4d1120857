#!/usr/bin/env bash
# Runs batchsweep and the PyTorch peer on the same model, batches, mode and precision, then prints per batch the
# samples/s ratio batchsweep / PyTorch eager (and / torch.compile with --compile), each run's knee, saturation and
# max fit (recomputed by `batchsweep analyze`), and batchsweep's planned bytes next to PyTorch's peak allocated.
#
#   bench/peers/compare_with_torch.sh BATCHSWEEP [--model M] [--batch B] [--mode train|infer]
#       [--precision fp32|tf32|fp16|bf16] [--backend auto|cpu|cuda] [--compile [--compile-mode MODE]]
#       [--graphs-off-too] [--out DIR] [--reuse] [-- FLAGS...]
#
# FLAGS after `--` go to both tools (the flags they share: --warmup, --min-samples, --min-time, --max-noise,
# --timeout, --seed, --accumulation, --checkpointing, --checkpoint-blocks N (the first N blocks backward reaches
# only: `-- --checkpoint-blocks 4`), and --set PATH=VALUE, repeatable, which changes a field of the model config
# for both: `-- --set input.sequence_length=32`). Reports land in DIR (default: a new temporary folder):
# batchsweep.json, torch-eager.json, torch-compile.json and their analyzed copies *.analyzed.json. With --reuse,
# a DIR that already holds finished batchsweep and eager reports of the same model, mode, precision, backend and
# FLAGS (any batches) keeps them and runs only what is missing: `--compile --reuse` after an eager comparison runs
# torch.compile alone (on its own --batch, which may be fewer), and the table joins the three by batch. Exit 2 on
# usage errors (and on --reuse of a DIR another comparison wrote); otherwise the exit code of the first tool that
# failed.
set -euo pipefail

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[[ $# -ge 1 ]] || usage
bsw=$1
shift
[[ -x $bsw && ! -d $bsw ]] || { echo "compare_with_torch.sh: BATCHSWEEP '$bsw' is not an executable file" >&2; exit 2; }

model=mlp batch=1,8,64,512 mode=train precision=fp32 backend=auto compile=0 reuse=0 out="" compile_mode=""
# --graphs-off-too: batchsweep once more with --graphs off (plain launches, as PyTorch eager makes), its own
# column beside the default's CUDA-graph replay, so a ratio at small batches says how much is launch gaps.
# --compile-mode MODE: torch.compile's mode (reduce-overhead records CUDA graphs, as batchsweep replays them).
graphs_off=0
shared=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --model|--batch|--mode|--precision|--backend|--out)
      [[ $# -ge 2 ]] || { echo "compare_with_torch.sh: $1 needs a value" >&2; exit 2; }
      declare "${1#--}=$2"
      shift 2 ;;
    --compile) compile=1; shift ;;
    --compile-mode)
      [[ $# -ge 2 ]] || { echo "compare_with_torch.sh: $1 needs a value" >&2; exit 2; }
      compile_mode=$2
      shift 2 ;;
    --graphs-off-too) graphs_off=1; shift ;;
    --reuse) reuse=1; shift ;;
    --) shift; shared=("$@"); break ;;
    -h|--help) usage ;;
    *) echo "compare_with_torch.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case $backend in
  auto) device=auto ;;
  cpu) device=cpu ;;
  cuda) device=cuda ;;
  *) echo "compare_with_torch.sh: --backend: '$backend' is not auto, cpu or cuda" >&2; exit 2 ;;
esac
[[ -n $out ]] || out=$(mktemp -d "${TMPDIR:-/tmp}/compare-with-torch.XXXXXX")
mkdir -p "$out"
python=${PYTHON:-python3}

# What the reports in DIR were run with, but for the batches: written once batchsweep and eager both finished,
# so a DIR whose comparison was cut short is run again, not reused.
stamp="model=$model mode=$mode precision=$precision backend=$backend flags=${shared[*]+${shared[*]}}"
reused=0
if [[ $reuse == 1 && -f $out/.compare-stamp ]]; then
  if [[ $(<"$out/.compare-stamp") != "$stamp" ]]; then
    echo "compare_with_torch.sh: --reuse: $out holds the reports of another comparison ($(<"$out/.compare-stamp")), not" \
      "of $stamp" >&2
    exit 2
  fi
  [[ -f $out/batchsweep.json && -f $out/torch-eager.json ]] && reused=1
fi

common=(--model "$model" --batch "$batch" --mode "$mode" --precision "$precision" --quiet ${shared[@]+"${shared[@]}"})
runs=(batchsweep)
if [[ $reused == 1 ]]; then
  echo "== batchsweep and PyTorch eager: reusing the reports in $out" >&2
else
  rm -f "$out/.compare-stamp"
  echo "== batchsweep ($backend): $model $mode $precision, batches $batch" >&2
  "$bsw" run "${common[@]}" --backend "$backend" --json "$out/batchsweep.json" >/dev/null
fi

# On the CPU, PyTorch computes with as many threads as batchsweep's OpenBLAS did (device.threads): a CPU's
# throughput scales with its threads, and torch's default (its physical cores) may not be OpenBLAS's.
threads=$("$python" -c 'import json, sys
d = json.load(open(sys.argv[1]))["device"]
print(d.get("threads", "") if d.get("backend") == "cpu" else "")' "$out/batchsweep.json")
peer=(--device "$device" --batchsweep "$bsw")
if [[ -n $threads ]]; then peer+=(--threads "$threads"); fi

if [[ $reused == 0 ]]; then
  echo "== PyTorch eager ($device${threads:+, $threads threads})" >&2
  "$python" "$here/torch_sweep.py" "${common[@]}" "${peer[@]}" --json "$out/torch-eager.json"
  printf '%s\n' "$stamp" >"$out/.compare-stamp"
fi
runs+=(torch-eager)
if [[ $graphs_off == 1 ]]; then
  if [[ $reused == 1 && -f $out/batchsweep-nographs.json ]]; then
    echo "== batchsweep --graphs off: reusing $out/batchsweep-nographs.json" >&2
  else
    echo "== batchsweep ($backend) --graphs off" >&2
    "$bsw" run "${common[@]}" --backend "$backend" --graphs off --json "$out/batchsweep-nographs.json" >/dev/null
  fi
  runs+=(batchsweep-nographs)
fi
if [[ $compile == 1 ]]; then
  echo "== PyTorch torch.compile ($device${compile_mode:+, mode $compile_mode})" >&2
  "$python" "$here/torch_sweep.py" "${common[@]}" "${peer[@]}" --compile ${compile_mode:+--compile-mode "$compile_mode"} \
    --json "$out/torch-compile.json"
  runs+=(torch-compile)
fi

for run in "${runs[@]}"; do
  "$bsw" analyze "$out/$run.json" --json - >"$out/$run.analyzed.json" 2>/dev/null
done

"$python" - "$out" "${runs[@]}" <<'PY'
"""Prints the comparison table from the analyzed reports."""
import json
import os
import sys

out, names = sys.argv[1], sys.argv[2:]
reports = {}
for name in names:
    with open(os.path.join(out, name + ".analyzed.json"), encoding="utf-8") as f:
        reports[name] = json.load(f)


def points(report):
    return {(p["batch"], p.get("accumulation", 1)): p for p in report["points"]}


def rate(p):
    if p is None:
        return "-"
    if p["status"] != "ok":
        return p["status"]
    return f"{p['samples_per_second']:,.1f}"


def mib(v):
    return "-" if v is None else f"{v / 2**20:,.1f}"


def ratio(a, b):
    if a is None or b is None or a["status"] != "ok" or b["status"] != "ok" or not b["samples_per_second"]:
        return "-"
    return f"{a['samples_per_second'] / b['samples_per_second']:.2f}x"


bsw = points(reports["batchsweep"])
torch_runs = [n for n in names if not n.startswith("batchsweep")]
# batchsweep with --graphs off (--graphs-off-too): its rate and its ratio to PyTorch eager, launch for launch.
nographs = points(reports["batchsweep-nographs"]) if "batchsweep-nographs" in reports else None
columns = ["batch", "batchsweep/s"]
for n in torch_runs:
    columns += [f"{n}/s", f"bsw/{n.split('-')[1]}"]
if nographs is not None:
    columns += ["no-graphs/s", "no-graphs/eager"]
columns += ["planned MiB", "torch peak MiB"]
rows = []
keys = sorted(set(bsw).union(*(points(reports[n]) for n in torch_runs)))
for key in keys:
    label = str(key[0]) if key[1] == 1 else f"{key[0]}x{key[1]}"
    b = bsw.get(key)
    row = [label, rate(b)]
    for n in torch_runs:
        t = points(reports[n]).get(key)
        row += [rate(t), ratio(b, t)]
    eager = points(reports[torch_runs[0]]).get(key)
    if nographs is not None:
        row += [rate(nographs.get(key)), ratio(nographs.get(key), eager)]
    row += [mib(b["memory"]["planned_bytes"] if b else None),
            mib(eager["memory"].get("measured_bytes") if eager else None)]
    rows.append(row)
widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(columns)]
print("  ".join(c.rjust(w) for c, w in zip(columns, widths)))
for r in rows:
    print("  ".join(v.rjust(w) for v, w in zip(r, widths)))
print()


def choice(c):
    if not c or c.get("batch") is None:
        return "none" + (f" ({c['reason']})" if c and c.get("reason") else "")
    return str(c["batch"])


for name in names:
    a = reports[name]["analysis"]
    device = reports[name]["device"]
    print(f"{name:14s} on {device.get('name', '?')} ({device.get('backend', '?')}): knee {choice(a['knee'])}, "
          f"saturation {choice(a['saturation'])}, max fit {choice(a['max_fit'])}, "
          f"best {choice(a['best_throughput'])}")
print(f"\nreports: {out}")
PY
