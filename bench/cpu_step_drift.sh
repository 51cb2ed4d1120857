#!/usr/bin/env bash
# Does a CPU point's step time drift as it runs? Runs the mlp preset at batch 1 and 64 for a few thousand steps
# and prints each tenth of every point's samples' mean step time, and the last tenth over the first. Flat is
# right; a rise of 10x once the model has memorized its synthetic batch was the subnormal slow path, which the
# CPU backend now flushes (README: the cpu backend). Usage: bench/cpu_step_drift.sh [path/to/batchsweep]
set -euo pipefail
bin=${1:-build/batchsweep}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$bin" run --model mlp --batch 1,64 --min-samples 3000 --min-time 3 --timeout 20 --json "$out/drift.json" -q \
  >/dev/null
python3 - "$out/drift.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
print(f"device: {report['device']['name']}; denormals: {report['device'].get('denormals', 'not said')}")
for p in report["points"]:
    s = p["samples_ms"]
    tenth = max(1, len(s) // 10)
    means = [sum(s[i:i + tenth]) / len(s[i:i + tenth]) for i in range(0, tenth * 10, tenth)]
    print(f"batch {p['batch']}: {len(s)} steps, final loss {p['loss']:.3g}; mean ms per tenth: "
          + " ".join(f"{m:.3f}" for m in means) + f"; last/first {means[-1] / means[0]:.2f}x")
PY
