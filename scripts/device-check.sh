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
# then, on the device (run tool: carry [".device"]), in ONE call (timeout_s 440: a machine start costs a minute or
# two of the 15 device minutes, and what is left after this call still allows a second, shorter one):
#
#   scripts/device-check.sh run all     # budget 400 s, in order of what the open issues need most:
#       quick gpu tests (every op and model against the CPU) -> calibration -> the issue-4 sweeps (telemetry,
#       issue 7, in each) -> three reruns of one sweep (how far a rerun moves the numbers) -> the PyTorch peer,
#       eager (issue 6) -> memcheck -> the preset tests -> torch.compile
#
# `run core` (tests, calibration, sweeps, memcheck) or `run peers` (the PyTorch peer) reruns one part. Each step
# is skipped once the budget (DEVICE_CHECK_BUDGET, seconds) no longer leaves it room. The device tool returns at
# most 8 files from $OUT, so a part writes its work to a folder of its own and returns three files:
# device-check-PART.log (everything printed), summary-PART.txt (the table at the end, also printed last, so the
# call's output_tail holds it) and device-check-PART.tar.gz (every report, test result and log) - packed on
# every way out, a failure or the tool's SIGTERM included, so give timeout_s 40 s above the budget.
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
# binaries. cuBLASLt and cuDNN are NOT carried (hundreds of MiB): `run` finds the device's own (PyTorch's nvidia-*
# wheels, or a CUDA toolkit) and puts them on the library path of the two binaries alone (wrappers in the
# unpacked stage), not of Python, PyTorch or compute-sanitizer. libstdc++ and libgcc_s are not carried either:
# cuDNN needs libstdc++.so.6, which the device has (PyTorch needs it), newer than Debian 12's.
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
      libstdc++.so*|libgcc_s.so*) ;;  # the device's own, newer (a bookworm copy first on the path could break it)
      *) cp -L "$lib" "$dir/lib/" ;;
    esac
  done
  strip --strip-unneeded "$dir/bin/"* 2>/dev/null || true
  du -sh "$dir" "$dir"/bin/* "$dir"/lib/* 2>/dev/null
  pack "$dir"
}

# The device's cuDNN, cuBLAS(Lt) and NVRTC folders, ':'-joined: PyTorch's nvidia-* wheels and the CUDA toolkit
# first (quick), a search of the whole file system (any mount) only where they hold no cuDNN.
find_cuda_libraries() {
  local python=${PYTHON:-python3} dirs=""
  dirs=$("$python" - <<'PY' 2>/dev/null || true
import glob, os, site, sys
roots = set(site.getsitepackages() + [site.getusersitepackages()] + [p for p in sys.path if p.endswith("-packages")])
found = set()
for root in roots:
    for pattern in ("nvidia/*/lib", "nvidia/*/lib64", "nvidia/cu*/lib"):
        for lib in glob.glob(os.path.join(root, pattern, "lib*.so*")):
            found.add(os.path.dirname(lib))
print(":".join(sorted(found)))
PY
)
  local d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu; do
    [[ -d $d ]] && dirs="${dirs:+$dirs:}$d"
  done
  local has_cudnn=0 list=()
  IFS=: read -ra list <<<"$dirs"
  for d in "${list[@]}"; do compgen -G "$d/libcudnn.so.9*" >/dev/null && has_cudnn=1; done
  if (( ! has_cudnn )); then
    echo "no cuDNN 9 in the wheels' or the toolkit's folders: searching the file system (60 s at most)" >&2
    dirs="${dirs:+$dirs:}$(timeout 60 find / \( -path /proc -o -path /sys -o -path /dev \) -prune -o \
      \( -name 'libcudnn.so.9*' -o -name 'libcublasLt.so.13*' -o -name 'libnvrtc.so.13*' \) -print 2>/dev/null |
      xargs -r -n1 dirname | sort -u | paste -sd: -)"
  fi
  echo "${dirs%:}"
}

# What a part leaves in $OUT, on every way out of `run` (an error, the tool's SIGTERM, the end): the summary (also
# printed last), and the work folder packed. (Globals: the locals of `run` are gone when an EXIT trap runs.)
finish() {
  local rc=$?
  trap - EXIT TERM INT
  set +e
  # A step a signal ended finishes first (its report is written as it stops; timeout kills it 5 s on).
  local i
  if [[ -n ${dc_step:-} ]]; then
    for i in {1..100}; do kill -0 "$dc_step" 2>/dev/null || break; sleep 0.1; done
  fi
  # The file first, then the log (and stdout): the file does not depend on a pipe.
  summary >"$dc_out/summary-$dc_part.txt" 2>&1
  local summary_rc=$?
  cat "$dc_out/summary-$dc_part.txt"
  tar -C "$dc_work" -czf "$dc_out/device-check-$dc_part.tar.gz" . 2>/dev/null ||
    echo "cannot pack $dc_work into $dc_out (a full disk?)"
  # The device tool returns files of up to 16 MiB.
  local packed
  packed=$(stat -c %s "$dc_out/device-check-$dc_part.tar.gz" 2>/dev/null || echo 0)
  if (( packed > 16 * 1024 * 1024 )); then
    echo "device-check-$dc_part.tar.gz is $((packed / 1024 / 1024)) MiB, over the 16 MiB the device tool returns:" \
      "packed again without the test logs and the peer's analyzed copies"
    tar -C "$dc_work" -czf "$dc_out/device-check-$dc_part.tar.gz" --exclude='*.analyzed.json' --exclude='*.log' . \
      2>/dev/null || true
    [[ -n "${DEVICE_CHECK_REHEARSAL:-}" ]] && rc=1
  fi
  if [[ -n "${DEVICE_CHECK_REHEARSAL:-}" ]]; then
    # A rehearsal exists to catch these before device time is spent on them: the summary failing, a peer
    # comparison that left no joined table, and more files in $OUT than the device tool returns (8).
    (( summary_rc != 0 )) && { echo "the summary failed (rc $summary_rc)"; rc=1; }
    if [[ $dc_part != core && -d $dc_work/peer-mlp ]]; then
      local f
      for f in batchsweep torch-eager torch-compile; do
        [[ -f $dc_work/peer-mlp/$f.analyzed.json ]] || { echo "the rehearsal's peer left no $f.analyzed.json"; rc=1; }
      done
    fi
    local files
    files=$(find "$dc_out" -type f | wc -l)
    (( files > 8 )) && { echo "$dc_out holds $files files: the device tool returns 8"; rc=1; }
  fi
  (( rc == 0 )) && rc=$dc_tests_rc
  [[ -n $dc_stage && $dc_stage != "$dc_dir" ]] && rm -rf "$dc_stage"
  rm -rf "$dc_work"
  # The log's tee ends with its input: wait for it (5 s at most: a step's stray child may hold the pipe), so
  # its last lines reach the file before the tool collects it.
  exec >&3 2>&3 3>&-
  for i in {1..50}; do kill -0 "$dc_tee" 2>/dev/null || break; sleep 0.1; done
  exit "$rc"
}

run() {
  dc_part=all
  case "${1:-}" in all|core|peers) dc_part=$1; shift ;; esac
  dc_dir=${1:-.device}
  dc_out=${OUT:-/tmp/device-check}
  mkdir -p "$dc_out"
  dc_work=$(mktemp -d "${TMPDIR:-/tmp}/device-check-work.XXXXXX")
  dc_stage="" dc_tests_rc=0
  dc_started=$SECONDS
  dc_budget=${DEVICE_CHECK_BUDGET:-$([[ $dc_part == all ]] && echo 400 || echo 240)}
  # The log's tee ignores the stop signals, so a SIGTERM to the whole group leaves it to take the summary.
  exec 3>&1 > >(trap '' TERM INT; exec tee "$dc_out/device-check-$dc_part.log") 2>&1
  dc_tee=$! dc_step=""
  trap finish EXIT
  trap '[[ -n $dc_step ]] && kill -TERM "$dc_step" 2>/dev/null; exit 143' TERM
  trap '[[ -n $dc_step ]] && kill -TERM "$dc_step" 2>/dev/null; exit 130' INT
  echo "== device-check $dc_part (budget ${dc_budget} s; files back: $dc_out)"
  dc_stage=$(unpack "$dc_dir") || exit 1
  # `devices --calibrate` saves its rates here and the sweeps after it take their MFU peak from them, so each
  # report's mfu is a ratio to this GPU's measured GEMM rate (issue 4's targets); packed with the rest.
  export BATCHSWEEP_CACHE_DIR="$dc_work/calibration"

  echo "== nvidia-smi"
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu \
    --format=csv || true
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv || true

  echo "== libraries"
  # cuDNN builds its runtime-fusion engines (Hopper SDPA among them) with NVRTC, loaded with dlopen: the torch
  # wheels keep libnvrtc in its own folder, and without it SDPA would fall back at batch 1.
  local libdirs=""
  [[ -z "${DEVICE_CHECK_REHEARSAL:-}" ]] && libdirs=$(find_cuda_libraries)
  dc_libpath="$(cd "$dc_stage" && pwd)/lib${libdirs:+:$libdirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  local path=$dc_libpath
  echo "library path of the two binaries: $path"
  # Wrappers: the path for batchsweep and test_gpu alone (PyTorch and the sanitizer keep their own).
  mkdir -p "$dc_stage/run"
  local b
  for b in batchsweep test_gpu; do
    printf '#!/usr/bin/env bash\nLD_LIBRARY_PATH=%q exec %q "$@"\n' "$path" "$(cd "$dc_stage" && pwd)/bin/$b" \
      >"$dc_stage/run/$b"
    chmod +x "$dc_stage/run/$b"
  done
  bsw="$dc_stage/run/batchsweep" gpu_tests="$dc_stage/run/test_gpu"
  if LD_LIBRARY_PATH=$path ldd "$dc_stage/bin/test_gpu" "$dc_stage/bin/batchsweep" | grep 'not found'; then
    echo "missing shared libraries (above): rebuild or stage again" >&2
    exit 1
  fi
  LD_LIBRARY_PATH=$path ldd "$dc_stage/bin/test_gpu" | grep -E 'cublas|cudnn|openblas|nvrtc' || true
  # The cuDNN the binaries load (built against the toolkit's headers; the runtime is the device's).
  LD_LIBRARY_PATH=$path ldd "$dc_stage/bin/batchsweep" | awk '/libcudnn/ {print $3}' | xargs -r readlink -f |
    sed 's/^/cuDNN loaded: /' || true

  if [[ $dc_part != peers ]]; then quick_tests; calibrate; sweeps; reruns; fi
  if [[ $dc_part != core ]]; then peer_checks eager; fi
  if [[ $dc_part != peers ]]; then memcheck; preset_tests; fi
  if [[ $dc_part != core ]]; then peer_checks compile; fi
  echo "== done in $((SECONDS - dc_started)) s"
}

# Runs a step (`timeout LIMIT COMMAND...`, killed 5 s after its SIGTERM if it lingers) in the background and
# waits for it: bash runs a trap only between commands, and `wait` returns at once when a signal comes, so a
# SIGTERM to the script (or its group: timeout sits in a group of its own) ends the step and packs the results
# now, not when the step's own limit runs out.
step() {
  local limit=$1
  shift
  timeout -k 5 "$limit" "$@" &
  dc_step=$!
  local rc=0
  wait "$dc_step" || rc=$?
  dc_step=""
  return "$rc"
}
# GTEST_FILTER (the rehearsal's subset) without the full-size presets.
without_presets() {
  local f=${GTEST_FILTER:-*}
  if [[ $f == *-* ]]; then echo "$f:Presets/*"; else echo "$f-Presets/*"; fi
}

# A step's time limit: its own, or what is left of the budget (at least 10 s), whichever is less.
step_limit() {
  local left=$((dc_budget - (SECONDS - dc_started)))
  (( left < 10 )) && left=10
  echo $(( left < $1 ? left : $1 ))
}
# Whether `margin` seconds or fewer are left of the budget.
spent() { (( SECONDS - dc_started > dc_budget - $1 )); }
# The margin a core step leaves for the steps after it: with the peer in the same call, room for it.
core_margin() { [[ $dc_part == all ]] && echo $(( $1 + 150 )) || echo "$1"; }

# Every op, model, path and memory check against the CPU reference, but the full-size presets (their CPU step
# takes seconds to minutes): those run after the measurements, as time allows. Not --gtest_brief: a run cut at
# its limit still shows which tests passed.
quick_tests() {
  echo "== gpu tests (all but the presets)"
  local rc=0
  step "$(step_limit 90)" "$gpu_tests" --gtest_filter="$(without_presets)" \
    --gtest_output="json:$dc_work/test_gpu.json" >"$dc_work/test_gpu.log" 2>&1 || rc=$?
  grep -E '^\[  (FAILED|PASSED) |^\[==========\]|Failure|SKIPPED' "$dc_work/test_gpu.log" | head -60 || true
  echo "test_gpu exit code: $rc"
  # Cut at its limit is no failure (the passes so far are in test_gpu.log), and an exit of 124 would read as
  # the call's own timeout to the device tool.
  if (( rc == 124 || rc == 137 )); then
    echo "test_gpu was cut at its time limit: the passes so far are in test_gpu.log"
  else
    dc_tests_rc=$rc
  fi
}

calibrate() {
  echo "== devices --calibrate"
  # (On the emulator the same flow on small products, device.cpp: the sweeps' MFU is then against its rates.)
  step "$(step_limit 60)" "$bsw" devices --calibrate --json >"$dc_work/devices.json" || echo "devices failed: rc $?"
  head -c 3000 "$dc_work/devices.json" || true
  echo
}

sweeps() {
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
  local s
  for s in "${sweeps[@]}"; do
    # An inference sweep in two rounds, the second in reverse order: whether the GPU's clocks drift across a
    # sweep (rounds_disagree, round_spread_pct in its points). A training sweep with --checkpointing: what the
    # recomputation costs on the card, and the batches it lets fit; and one batch that fits 80 GiB with only the
    # first 7 of its 12 blocks checkpointed (plan: +14% FLOPs against +24% for all).
    local model mode precision batches extra
    read -r model mode precision batches extra <<<"$s"
    local name="$model-$mode-$precision"
    [[ "$extra" == *--checkpointing* ]] && name+="-checkpointing"
    [[ "$extra" == *--checkpoint-blocks* ]] && name+="-checkpoint-blocks"
    if spent "$(core_margin 30)"; then echo "skipping $name: the budget is spent"; continue; fi
    echo "-- $name ($batches)"
    local started_at=$SECONDS
    # shellcheck disable=SC2086
    step "$(step_limit 60)" "$bsw" run --model "$model" --mode "$mode" --precision "$precision" \
      --batch "$batches" "${common[@]}" $extra --json "$dc_work/$name.json" || echo "$name: rc $?"
    echo "   ($((SECONDS - started_at)) s)"
  done
}

# How far a rerun moves the numbers on the card, against the reports' own intervals (bench/ci_calibration.py:
# on this project's 2-core CPU, runs without rounds differed by 4-6 times them, and `--rounds` holds what the
# rounds show): three runs of one short sweep in two rounds, one after another.
reruns() {
  echo "== reruns: how far a rerun moves the numbers, against the reports' intervals"
  local spec=(--backend cuda --model mlp-large --mode train --precision bf16 --batch 256,4096,65536 --rounds 2
    --warmup 3 --min-samples 10 --min-time 0.3 --timeout 20)
  if [[ -n "${DEVICE_CHECK_REHEARSAL:-}" ]]; then
    spec=(--backend cuda --model mlp --mode train --precision bf16 --batch 1,16 --rounds 2 --warmup 1
      --min-samples 3 --min-time 0 --max-noise 100 --timeout 20)
  fi
  if spent "$(core_margin 40)"; then echo "skipping the reruns: the budget is spent"; return; fi
  step "$(step_limit 45)" python3 bench/ci_calibration.py --binary "$bsw" --runs 3 --keep "$dc_work/reruns" \
    -- "${spec[@]}" >"$dc_work/reruns.txt" || echo "reruns: rc $?"
  cat "$dc_work/reruns.txt" || true
}

# `eager`: batchsweep against PyTorch eager on every model (the ratios issue 6 asks for), also timing batchsweep
# with --graphs off (plain launches, as eager makes them: at small batches the CUDA-graph replay alone can make
# most of a ratio, and the table shows both). `compile`: torch.compile on one batch of each, reusing the eager
# comparison's reports (--reuse) in the same folder; last, as it compiles again at each batch.
peer_checks() {
  local which=$1
  echo "== PyTorch peer (issue 6, $which): same model, same batches, same GPU"
  local python=${PYTHON:-python3} backend=cuda common=(--warmup 3 --min-samples 10 --min-time 0.3 --timeout 15)
  local peers=("gpt2-small 1,4,16 --graphs-off-too" "bert-base 1,16,64 --graphs-off-too"
    "resnet-small 16,256,1024 --graphs-off-too")
  [[ $which == compile ]] && peers=("gpt2-small 4 --compile" "bert-base 16 --compile" "resnet-small 256 --compile")
  local usable="import torch; assert torch.cuda.is_available(), 'torch.cuda.is_available() is False'"
  if [[ -n "${DEVICE_CHECK_REHEARSAL:-}" ]]; then
    # The emulator is no GPU for PyTorch: the flow (reuse, the joined table) on the CPU, where torch is installed.
    backend=cpu usable="import torch"
    common=(--warmup 1 --min-samples 3 --min-time 0 --max-noise 100 --timeout 20)
    peers=("mlp 1,4 --graphs-off-too")
    [[ $which == compile ]] && peers=("mlp 4 --compile")
  fi
  local probe
  if ! probe=$("$python" -c "$usable" 2>&1); then
    echo "skipping the PyTorch peer: no ${backend/cuda/CUDA} PyTorch for $python on this machine:"
    tail -n 3 <<<"$probe"
    return
  fi
  local p
  for p in "${peers[@]}"; do
    local model batches extra
    read -r model batches extra <<<"$p"
    local tag="peer-$model"
    [[ $extra == *--compile* ]] && tag+="-compile"
    # The eager ones leave room for memcheck and the preset tests in a whole run; torch.compile needs a minute.
    local margin=30
    [[ $which == eager && $dc_part == all ]] && margin=60
    [[ $which == compile ]] && margin=60
    if spent "$margin"; then echo "skipping $tag: the budget is spent"; continue; fi
    echo "-- $tag ($batches)"
    local started_at=$SECONDS
    # shellcheck disable=SC2086
    step "$(step_limit 90)" env PYTHON="$python" bench/peers/compare_with_torch.sh "$bsw" --model "$model" \
      --mode train --precision bf16 --batch "$batches" --backend "$backend" --out "$dc_work/peer-$model" $extra \
      $([[ $extra == *--compile* ]] && echo --reuse) -- "${common[@]}" || echo "$tag: rc $?"
    echo "   ($((SECONDS - started_at)) s)"
  done
}

memcheck() {
  echo "== compute-sanitizer memcheck (a small subset)"
  local sanitizer=not-run
  if spent 45; then
    sanitizer="skipped: the budget is spent"
  elif [[ -n "${DEVICE_CHECK_REHEARSAL:-}" ]]; then
    sanitizer="skipped: a rehearsal"
  elif command -v compute-sanitizer >/dev/null 2>&1; then
    local rc=0
    # The library path for the test binary (through the sanitizer, which launches it) and not a wrapper: the
    # sanitizer checks the process it starts.
    step "$(step_limit 60)" env LD_LIBRARY_PATH="$dc_libpath" compute-sanitizer --tool memcheck --error-exitcode 9 "$dc_stage/bin/test_gpu" \
      --gtest_filter='Storage/GpuOps.*/f32:Storage/GpuOps.*/bf16:Models/GpuSession.*/tokens_bf16:Models/GpuSession.*/image_fp32:Storage/GpuCudnnConv.*/bf16:Shapes/GpuCudnnSdpa.*/bf16_causal_64' \
      --gtest_brief=1 >"$dc_work/memcheck.log" 2>&1 || rc=$?
    if (( rc == 0 )); then
      sanitizer=clean
    elif grep -q "Device not supported" "$dc_work/memcheck.log"; then
      # gVisor machines (KINDS.md): the sanitizer refuses the device; nothing was checked.
      sanitizer="unavailable: compute-sanitizer does not support the device on this runtime (gVisor)"
    else
      sanitizer="failed (rc $rc, see memcheck.log)"
    fi
    tail -n 5 "$dc_work/memcheck.log"
  else
    sanitizer="unavailable: no compute-sanitizer on the PATH"
  fi
  echo "memcheck: $sanitizer"
}

# The full-size presets' first bf16 step against the CPU's: after the measurements, for as long as is left.
preset_tests() {
  echo "== gpu tests: the presets"
  if spent 40; then echo "skipping the preset tests: the budget is spent"; return; fi
  if [[ -n "${DEVICE_CHECK_REHEARSAL:-}" ]]; then echo "skipped: a rehearsal (the emulator would take hours)"; return; fi
  local rc=0 limit
  limit=$(step_limit 150)
  # A whole run keeps 30 s for the torch.compile step after it.
  [[ $dc_part == all ]] && limit=$(( limit > 40 ? limit - 30 : 10 ))
  step "$limit" "$gpu_tests" --gtest_filter='Presets/*' --gtest_output="json:$dc_work/test_gpu_presets.json" \
    >"$dc_work/test_gpu_presets.log" 2>&1 || rc=$?
  grep -E '^\[       OK \]|^\[  (FAILED|PASSED) |Failure' "$dc_work/test_gpu_presets.log" | head -30 || true
  (( rc == 124 )) && echo "the preset tests were cut at their time limit (the ones that finished are above)"
  echo "preset tests exit code: $rc"
  (( rc != 0 && rc != 124 && rc != 137 && dc_tests_rc == 0 )) && dc_tests_rc=$rc
  return 0
}

summary() {
  echo "== summary ($((SECONDS - dc_started)) s)"
  python3 - "$dc_work" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
for name in ("test_gpu.json", "test_gpu_presets.json"):
    t = out / name
    if not t.exists():
        continue
    r = json.loads(t.read_text())
    print(f"{name}: {r.get('tests')} tests, {r.get('failures')} failures, {r.get('disabled', 0)} disabled")
    for suite in r.get("testsuites", []):
        for case in suite.get("testsuite", []):
            if case.get("failures"):
                print("  FAILED", suite["name"] + "." + case["name"], case["failures"][0]["failure"][:300])
reruns = out / "reruns.txt"
if reruns.exists():
    print("reruns (bench/ci_calibration.py):")
    print(reruns.read_text().rstrip())
d = out / "devices.json"
if d.exists():
    try:
        print("devices:", d.read_text()[:600].replace("\n", " "))
    except Exception as e:
        print("devices.json unreadable:", e)
for f in sorted(out.glob("*-*-*.json")):
    if f.name.startswith("test_gpu"):
        continue
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
def rates(path):
    try:
        rep = json.loads(path.read_text())
    except Exception:
        return {}, None
    ok = {p["batch"]: p["samples_per_second"] for p in rep.get("points", []) if p.get("status") == "ok"}
    return ok, ((rep.get("analysis") or {}).get("knee") or {}).get("batch")
for peer in sorted(out.glob("peer-*")):
    ours, our_knee = rates(peer / "batchsweep.json")
    plain, _ = rates(peer / "batchsweep-nographs.json")
    line = [f"{peer.name}: knee batchsweep {our_knee}"]
    for run in ("torch-eager", "torch-compile"):
        theirs, knee = rates(peer / f"{run}.json")
        if not theirs:
            continue
        ratios = [f"{b}: {ours[b] / theirs[b]:.2f}x" + (f" ({plain[b] / theirs[b]:.2f}x graphs off)" if b in plain else "")
                  for b in sorted(theirs) if b in ours and theirs[b] > 0]
        line.append(f"{run} knee {knee}; batchsweep/{run} " + ", ".join(ratios))
    print("; ".join(line))
PY
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
  # Only what an earlier rehearsal left there: OUT may name a folder that holds other things.
  mkdir -p "$OUT"
  rm -f "$OUT"/device-check-*.log "$OUT"/device-check-*.tar.gz "$OUT"/summary-*.txt
  # As the device runs it: one call of the whole, in a process of its own, so that errexit holds there as on
  # the device (in `(...) ||` it would be off).
  local rc=0
  bash "$0" run all "$dir" || rc=$?
  rm -rf "$dir"
  return "$rc"
}

case "${1:-}" in
  stage) shift; stage "$@" ;;
  run) shift; run "$@" ;;
  rehearse) shift; rehearse "$@" ;;
  *) echo "usage: $0 stage BUILD_DIR [STAGE_DIR] | run [all|core|peers] [STAGE_DIR] | rehearse BUILD_DIR" >&2; exit 2 ;;
esac
