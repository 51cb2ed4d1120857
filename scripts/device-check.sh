#!/usr/bin/env bash
# Device check of the CUDA backend, for a session that has the H200 machine (see ../shared/DEVICE.md).
#
# The GPU machine has no Debian packages and reaches no registry, so the binaries are built HERE and carried:
#
#   cmake -S . -B build-dev -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 -DBATCHSWEEP_STATIC_RUNTIME=ON \
#         -DBATCHSWEEP_WERROR=ON -DCMAKE_BUILD_TYPE=Release
#   cmake --build build-dev --target batchsweep test_gpu -j2
#   scripts/device-check.sh stage build-dev            # -> .device/payload.tar.gz (bin/ and lib/), ~20 MiB
#   echo /.device/ >> .git/info/exclude                 # ignored, so it travels only through `carry`
#
# then, on the device (run tool: carry [".device"]), in two calls of about five minutes each (timeout_s ~ 340),
# so that neither part's budget is spent by the other, and each part's files come back by themselves:
#
#   scripts/device-check.sh run core    # gpu tests, calibration, the sweeps, memcheck; a short table at the end
#   scripts/device-check.sh run peers   # the PyTorch peer (issue 6): eager, then torch.compile on fewer batches
#
# (`run` alone, or `run all`, does both in one 8-minute budget, as far as it lasts.) DEVICE_CHECK_BUDGET sets a
# part's budget in seconds (default 480 for all, 290 for core or peers); everything lands under $OUT.
#
# Before spending device time, rehearse the whole flow here on the CPU emulator (tests/emu): the same steps and
# summary with batchsweep-emu and test_gpu_emu, small models instead of the presets (which the emulator would
# take hours over). It checks the script, not the GPU:
#
#   scripts/device-check.sh rehearse build              # -> /tmp/device-check-rehearsal (or $OUT)
#
# fmt is header-only, GoogleTest static, libstdc++/libgcc static with BATCHSWEEP_STATIC_RUNTIME. OpenBLAS is linked
# from Debian as a shared library, so `stage` copies libopenblas.so.0 (and libgfortran/libquadmath) into the stage:
# ~37 MiB of the ~60 unpacked, which is why the stage travels gzipped (a carry holds 64 MiB in all). Linking the
# static libopenblas.a would not help: its DYNAMIC_ARCH table keeps every CPU's kernels, ~25 MiB in each of the two
# binaries. cuBLASLt and cuDNN are NOT carried (hundreds of MiB): `run` finds the device's own (CUDA toolkit, or
# PyTorch's nvidia-* wheels) and puts them on LD_LIBRARY_PATH.
set -euo pipefail

# The most a stage may hold packed: a carry holds 64 MiB with the working tree (~4 MiB) beside it.
readonly kMostPackedBytes=$((56 * 1024 * 1024))

# bin/ and lib/ of `dir` into dir/payload.tar.gz, which `run` unpacks; refused past kMostPackedBytes.
pack() {
  local dir=$1
  tar -C "$dir" -czf "$dir/payload.tar.gz" bin lib
  rm -rf "$dir/bin" "$dir/lib"
  local bytes
  bytes=$(stat -c %s "$dir/payload.tar.gz")
  echo "packed: $dir/payload.tar.gz, $((bytes / 1024 / 1024)) MiB"
  if (( bytes > kMostPackedBytes )); then
    echo "the stage is $((bytes / 1024 / 1024)) MiB packed, past the $((kMostPackedBytes / 1024 / 1024)) MiB a carry" \
      "leaves it: build for one architecture (-DCMAKE_CUDA_ARCHITECTURES=90) with BATCHSWEEP_STATIC_RUNTIME" >&2
    exit 1
  fi
}

# The stage `run` reads: `dir` itself where it holds bin/, else dir/payload.tar.gz unpacked into a fresh folder
# (the carried tree may be read-only). Prints the folder.
unpack() {
  local dir=$1
  if [[ -x $dir/bin/batchsweep ]]; then echo "$dir"; return; fi
  if [[ ! -f $dir/payload.tar.gz ]]; then
    echo "no stage in $dir (neither bin/ nor payload.tar.gz): run 'device-check.sh stage BUILD_DIR' first" >&2
    exit 1
  fi
  local to
  to=$(mktemp -d "${TMPDIR:-/tmp}/device-check-stage.XXXXXX")
  # (Run in $(...) under `|| exit`, where errexit is off: each failure is checked here.)
  if ! tar -C "$to" -xzf "$dir/payload.tar.gz" || [[ ! -x $to/bin/batchsweep || ! -x $to/bin/test_gpu ]]; then
    echo "cannot unpack $dir/payload.tar.gz (a truncated payload, or a full disk): stage it again" >&2
    rm -rf "$to"
    exit 1
  fi
  echo "$to"
}

stage() {
  local build=${1:?usage: device-check.sh stage BUILD_DIR [STAGE_DIR]} dir=${2:-.device}
  rm -rf "$dir" && mkdir -p "$dir/bin" "$dir/lib"
  cp "$build/batchsweep" "$build/tests/test_gpu" "$dir/bin/"
  # Shared libraries the binaries need that the GPU machine does not have: everything but the C library, the
  # dynamic loader and the CUDA libraries (the device brings its own driver-matched ones).
  ldd "$dir/bin/batchsweep" "$dir/bin/test_gpu" | awk '/=> \//{print $3}' | sort -u | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libcuda.so*|libcublas*|libcudnn*|libcudart*) ;;
      *) cp -L "$lib" "$dir/lib/" ;;
    esac
  done
  strip --strip-unneeded "$dir/bin/"* 2>/dev/null || true
  du -sh "$dir" "$dir"/bin/* "$dir"/lib/* 2>/dev/null
  pack "$dir"
}

run() {
  local part=all
  case "${1:-}" in all|core|peers) part=$1; shift ;; esac
  local dir=${1:-.device}
  local out=${OUT:-/tmp/device-check}
  mkdir -p "$out"
  local started=$SECONDS
  local budget=${DEVICE_CHECK_BUDGET:-$([[ $part == all ]] && echo 480 || echo 290)}
  # A step's time limit: its own, or what is left of the budget (at least 10 s), whichever is less.
  step_limit() {
    local left=$((budget - (SECONDS - started)))
    (( left < 10 )) && left=10
    echo $(( left < $1 ? left : $1 ))
  }
  # Whether `margin` seconds or fewer are left of the budget.
  spent() { (( SECONDS - started > budget - $1 )); }
  exec > >(tee "$out/device-check-$part.log") 2>&1
  echo "== device-check $part (budget ${budget} s)"
  local stage
  stage=$(unpack "$dir") || exit 1
  # shellcheck disable=SC2064  # the folder is known now
  [[ $stage != "$dir" ]] && trap "rm -rf '$stage'" EXIT
  dir=$stage
  # `devices --calibrate` saves its rates here and the sweeps after it take their MFU peak from them, so each
  # report's mfu is a ratio to this GPU's measured GEMM rate (issue 4's targets); the cache comes back too.
  export BATCHSWEEP_CACHE_DIR="$out/calibration"

  echo "== nvidia-smi"
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.max.sm,power.draw,temperature.gpu \
    --format=csv || true
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv || true

  echo "== libraries"
  # cuDNN builds its runtime-fusion engines (Hopper SDPA among them) with NVRTC, loaded with dlopen: the torch
  # wheels keep libnvrtc in its own folder, and without it SDPA would fall back at batch 1.
  local libdirs=""
  [[ -z "${DEVICE_CHECK_REHEARSAL:-}" ]] && libdirs=$(find / -xdev \( -name 'libcudnn.so.9*' -o -name 'libcublasLt.so.13*' -o -name 'libcublas.so.13*' \
    -o -name 'libnvrtc.so.13*' -o -name 'libnvrtc-builtins.so.13*' \) \
    -not -path '*/proc/*' 2>/dev/null | xargs -r -n1 dirname | sort -u | tr '\n' ':' || true)
  export LD_LIBRARY_PATH="$(cd "$dir" && pwd)/lib:${libdirs}${LD_LIBRARY_PATH:-}"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  if ldd "$dir/bin/test_gpu" "$dir/bin/batchsweep" | grep 'not found'; then
    echo "missing shared libraries (above): rebuild or stage again" >&2
    exit 1
  fi
  ldd "$dir/bin/test_gpu" | grep -E 'cublas|cudnn|openblas' || true

  local tests_rc=0
  if [[ $part != peers ]]; then core_checks; fi
  if [[ $part != core ]]; then peer_checks; fi
  if [[ $part != peers ]]; then memcheck; fi
  summary
}

# The parts of `run`, which they share its locals with (dir, out, started, budget, tests_rc).
core_checks() {
  echo "== gpu tests"
  timeout "$(step_limit 240)" "$dir/bin/test_gpu" --gtest_brief=1 --gtest_output="json:$out/test_gpu.json" || tests_rc=$?
  echo "test_gpu exit code: $tests_rc"

  echo "== devices --calibrate"
  # (On the emulator the same flow on small products, device.cpp: the sweeps' MFU is then against its rates.)
  timeout "$(step_limit 120)" "$dir/bin/batchsweep" devices --calibrate --json >"$out/devices.json" \
    || echo "devices failed: rc $?"
  head -c 3000 "$out/devices.json" || true
  echo

  echo "== sweeps"
  local common=(--backend cuda --quiet --warmup 3 --min-samples 10 --min-time 0.3 --timeout 20)
  # Issue 4's targets first (mlp-large's GEMM rate at the knee, gpt2-small's MFU), then cuDNN's convolutions,
  # BERT, the clocks across rounds and checkpointing, as far as the budget lasts.
  local sweeps=(
    "mlp-large train bf16 1:65536:*4"
    "gpt2-small train bf16 1:64:*2"
    "resnet-small train bf16 16:4096:*4"
    "bert-base train bf16 1:512:*4"
    "gpt2-small infer bf16 1:256:*4 --rounds 2"
    "gpt2-small train bf16 8:256:*2 --checkpointing"
    "gpt2-small train bf16 200 --checkpoint-blocks 7"
  )
  if [[ -n "${DEVICE_CHECK_REHEARSAL:-}" ]]; then
    common=(--backend cuda --quiet --warmup 1 --min-samples 3 --min-time 0 --max-noise 100 --timeout 20)
    sweeps=("mlp train bf16 1:256:*4" "tiny-lm train bf16 1:4:*2" "tiny-lm infer fp16 1:4:*4 --rounds 2"
      "tiny-lm train bf16 1:4:*2 --checkpointing" "tiny-lm train bf16 4 --checkpoint-blocks 1")
  fi
  for s in "${sweeps[@]}"; do
    # An inference sweep in two rounds, the second in reverse order: whether the GPU's clocks drift across a
    # sweep (rounds_disagree, round_spread_pct in its points). A training sweep with --checkpointing: what the
    # recomputation costs on the card, and the batches it lets fit; and one batch that fits 80 GiB with only the
    # first 7 of its 12 blocks checkpointed (plan: +14% FLOPs against +24% for all).
    read -r model mode precision batches extra <<<"$s"
    local name="$model-$mode-$precision"
    [[ "$extra" == *--checkpointing* ]] && name+="-checkpointing"
    [[ "$extra" == *--checkpoint-blocks* ]] && name+="-checkpoint-blocks"
    if spent 60; then echo "skipping $name: the budget is spent"; continue; fi
    echo "-- $name ($batches)"
    # shellcheck disable=SC2086
    timeout "$(step_limit 120)" "$dir/bin/batchsweep" run --model "$model" --mode "$mode" --precision "$precision" \
      --batch "$batches" "${common[@]}" $extra --json "$out/$name.json" || echo "$name: rc $?"
  done

}

peer_checks() {
  echo "== PyTorch peer (issue 6): same model, same batches, same GPU; eager, then torch.compile while time lasts"
  local python=${PYTHON:-python3} backend=cuda common=(--warmup 3 --min-samples 10 --min-time 0.3 --timeout 15)
  # Eager first, for every model: batchsweep and eager make the ratios issue 6 asks for. Then torch.compile on
  # fewer batches (it compiles again at each), reusing the eager comparison's reports (--reuse) in the same folder.
  # The eager runs also time batchsweep with --graphs off (plain launches, as eager makes them): at small
  # batches the CUDA-graph replay alone can make most of a ratio, and the table then shows both.
  local peers=(
    "gpt2-small 1:16:*2 --graphs-off-too"
    "bert-base 1:64:*4 --graphs-off-too"
    "resnet-small 16:1024:*4 --graphs-off-too"
    "gpt2-small 1,16 --compile"
    "bert-base 4,64 --compile"
    "resnet-small 64,1024 --compile"
  )
  local usable="import torch; assert torch.cuda.is_available()"
  if [[ -n "${DEVICE_CHECK_REHEARSAL:-}" ]]; then
    # The emulator is no GPU for PyTorch: the flow (reuse, the joined table) on the CPU, where torch is installed.
    backend=cpu usable="import torch"
    common=(--warmup 1 --min-samples 3 --min-time 0 --max-noise 100 --timeout 20)
    peers=("mlp 1,4 --graphs-off-too" "mlp 4 --compile")
  fi
  if ! "$python" -c "$usable" 2>/dev/null; then
    echo "skipping the PyTorch peer: no ${backend/cuda/CUDA} PyTorch for $python on this machine"
    return
  fi
  for p in "${peers[@]}"; do
    read -r model batches extra <<<"$p"
    local tag="peer-$model"
    [[ $extra == *--compile* ]] && tag+="-compile"
    if spent 40; then echo "skipping $tag: the budget is spent"; continue; fi
    echo "-- $tag ($batches)"
    # shellcheck disable=SC2086
    timeout "$(step_limit 120)" env PYTHON="$python" bench/peers/compare_with_torch.sh "$dir/bin/batchsweep" --model "$model" \
      --mode train --precision bf16 --batch "$batches" --backend "$backend" --out "$out/peer-$model" $extra \
      $([[ $extra == *--compile* ]] && echo --reuse) -- "${common[@]}" || echo "$tag: rc $?"
  done
}

memcheck() {
  echo "== compute-sanitizer memcheck (a small subset)"
  local sanitizer=not-run
  # Last of the measurements: correctness first (test_gpu), then the numbers #4 and #6 ask for, then this.
  if spent 100; then
    sanitizer="skipped: the budget is spent"
  elif [[ -n "${DEVICE_CHECK_REHEARSAL:-}" ]]; then
    sanitizer="skipped: a rehearsal"
  elif command -v compute-sanitizer >/dev/null 2>&1; then
    local rc=0
    timeout "$(step_limit 100)" compute-sanitizer --tool memcheck --error-exitcode 9 "$dir/bin/test_gpu" \
      --gtest_filter='Storage/GpuOps.*/f32:Storage/GpuOps.*/bf16:Models/GpuSession.*/tokens_bf16:Models/GpuSession.*/image_fp32:Storage/GpuCudnnConv.*/bf16:Shapes/GpuCudnnSdpa.*/bf16_causal_64' \
      --gtest_brief=1 >"$out/memcheck.log" 2>&1 || rc=$?
    if (( rc == 0 )); then
      sanitizer=clean
    elif grep -q "Device not supported" "$out/memcheck.log"; then
      # gVisor machines (KINDS.md): the sanitizer refuses the device; nothing was checked.
      sanitizer="unavailable: compute-sanitizer does not support the device on this runtime (gVisor)"
    else
      sanitizer="failed (rc $rc, see memcheck.log)"
    fi
    tail -n 5 "$out/memcheck.log"
  else
    sanitizer="unavailable: no compute-sanitizer on the PATH"
  fi
  echo "memcheck: $sanitizer"
}

summary() {
  echo "== summary ($((SECONDS - started)) s)"
  local summary_rc=0
  python3 - "$out" <<'PY' || summary_rc=$?
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
t = out / "test_gpu.json"
if t.exists():
    r = json.loads(t.read_text())
    print(f"test_gpu: {r.get('tests')} tests, {r.get('failures')} failures, {r.get('disabled', 0)} disabled")
    for suite in r.get("testsuites", []):
        for case in suite.get("testsuite", []):
            if case.get("failures"):
                print("  FAILED", suite["name"] + "." + case["name"], case["failures"][0]["failure"][:300])
d = out / "devices.json"
if d.exists():
    try:
        print("devices:", d.read_text()[:600].replace("\n", " "))
    except Exception as e:
        print("devices.json unreadable:", e)
for f in sorted(out.glob("*-*-*.json")):
    try:
        rep = json.loads(f.read_text())
    except Exception as e:
        print(f"{f.name}: unreadable ({e})")
        continue
    pts = rep.get("points", [])
    ok = [p for p in pts if p.get("status") == "ok"]
    a = rep.get("analysis", {})
    pick = lambda k: (a.get(k) or {}).get("batch")
    dev = rep.get("device", {})
    at_knee = next((p for p in ok if p.get("batch") == pick("knee")), None)
    print(f"{f.stem:28s} points {len(pts):3d} ok {len(ok):3d} knee {pick('knee')} max_fit {pick('max_fit')} "
          f"recommended {pick('recommended')}  paths {dev.get('execution_paths')}")
    best = max((p for p in ok if p.get("mfu") is not None), key=lambda p: p["mfu"], default=None)
    print(f"  mfu at the knee {at_knee.get('mfu') if at_knee else None}, best "
          f"{best['mfu'] if best else None} at batch {best['batch'] if best else None}, of peak "
          f"{dev.get('peak_flops')} ({dev.get('peak_flops_source')})")
    for p in ok:
        mem = p.get("memory", {})
        planned, used = mem.get("planned_bytes"), mem.get("device_used_bytes")
        tel = p.get("telemetry") or {}
        print(f"  batch {p['batch']:6d} {p['samples_per_second']:12.1f} samples/s  p99 {p['step_ms']['p99']:9.3f} ms"
              f"  mfu {p.get('mfu')}  planned {planned}  device_used {used}  J/sample {tel.get('joules_per_sample')}")
        if tel:  # issue 7: what nvidia-smi would have shown during the point
            print(f"      power {(tel.get('power_w') or {}).get('mean')} W (max {(tel.get('power_w') or {}).get('max')})"
                  f"  SM clock median {(tel.get('sm_clock_mhz') or {}).get('median')} MHz"
                  f"  memory clock median {(tel.get('mem_clock_mhz') or {}).get('median')} MHz"
                  f"  util {tel.get('utilization_pct')}%  {tel.get('temperature_c')} C"
                  f"  throttle {tel.get('throttle_reasons')}")
        if p.get("rounds"):  # run --rounds: each round's mean step, and whether they disagree
            print(f"      rounds {[r.get('mean_ms') for r in p['rounds']]} ms  spread {p.get('round_spread_pct')}%"
                  f"  disagree {p.get('rounds_disagree')}")
    if (a.get("energy_optimal") or {}).get("batch") is not None:
        print(f"  energy optimal: batch {a['energy_optimal']['batch']} ({a['energy_optimal'].get('reason')})")
PY
  if (( summary_rc != 0 )); then
    echo "the summary failed (rc $summary_rc)"
    # A rehearsal exists to catch exactly this before device time is spent on it.
    if [[ -n "${DEVICE_CHECK_REHEARSAL:-}" ]]; then exit 1; fi
  fi
  # A rehearsal checks the peer's flow too: a comparison that ran must have left its joined table's reports.
  if [[ -n "${DEVICE_CHECK_REHEARSAL:-}" && $part != core && -d $out/peer-mlp ]]; then
    local f
    for f in batchsweep torch-eager torch-compile; do
      [[ -f $out/peer-mlp/$f.analyzed.json ]] || { echo "the rehearsal's peer left no $f.analyzed.json"; exit 1; }
    done
  fi
  exit "$tests_rc"
}

# The run above, here, on the CPU emulator's binaries (built with the default CUDA build: batchsweep-emu and
# tests/emu/test_gpu_emu), with small sweeps. Exit code: run's (test_gpu_emu's).
rehearse() {
  local build=${1:?usage: device-check.sh rehearse BUILD_DIR}
  local dir
  dir=$(mktemp -d /tmp/device-check-stage.XXXXXX)
  mkdir -p "$dir/bin" "$dir/lib"
  cp "$build/batchsweep-emu" "$dir/bin/batchsweep"
  cp "$build/tests/emu/test_gpu_emu" "$dir/bin/test_gpu"
  pack "$dir" >/dev/null  # and `run` unpacks it, as on the device
  export OUT=${OUT:-/tmp/device-check-rehearsal} DEVICE_CHECK_REHEARSAL=1
  # The fake NVML (tests/fake_nvml; its GPU 0 sits at the emulator's PCI bus id), so the telemetry columns of
  # the summary are rehearsed too.
  [[ -f "$build/tests/libfake_nvml.so" ]] && export BATCHSWEEP_NVML_LIBRARY="$build/tests/libfake_nvml.so"
  # A part of the emulated gpu suite (ctest runs all of it): the script's handling of the results is the point.
  export GTEST_FILTER=${GTEST_FILTER:-'Emulator*:GpuInit*:Storage/GpuOps.Layernorm*:Models/GpuSession.*mlp*:GpuSessionMemory.OutOfMemory*'}
  rm -rf "$OUT"
  # The two parts, as the device runs them (two calls), each with its own budget, and each in a process of
  # its own, so that errexit holds there as on the device (in `(...) ||` it would be off).
  local rc=0
  bash "$0" run core "$dir" || rc=$?
  bash "$0" run peers "$dir" || rc=$?
  rm -rf "$dir"
  return "$rc"
}

case "${1:-}" in
  stage) shift; stage "$@" ;;
  run) shift; run "$@" ;;
  rehearse) shift; rehearse "$@" ;;
  *) echo "usage: $0 stage BUILD_DIR [STAGE_DIR] | run [all|core|peers] [STAGE_DIR] | rehearse BUILD_DIR" >&2; exit 2 ;;
esac
