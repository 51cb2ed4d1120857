#!/usr/bin/env bash
# Installs batchsweep's build dependencies (Debian packages, run as root; idempotent) and builds build/.
# Extra CMake arguments come from BSW_CMAKE_ARGS (e.g. "-DBATCHSWEEP_WERROR=ON" in CI, "-DBATCHSWEEP_CUDA=OFF").
# BSW_SKIP_APT=1 skips the package step (a machine that already has them, or no root).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake ninja-build g++ git pkg-config libcli11-dev nlohmann-json3-dev libfmt-dev libgtest-dev libgmock-dev
          libopenblas-dev clang libclang-rt-14-dev clang-format python3 python3-pip python3-jsonschema)
if [[ "${BSW_SKIP_APT:-0}" != 1 ]]; then
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "bootstrap: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

# Python: jsonschema validates reports against configs/schema in the tests, which use the python3 on PATH or
# Debian's /usr/bin/python3 (python3-jsonschema above). Only a machine where neither has it gets it from PyPI.
if ! python3 -c 'import jsonschema' 2>/dev/null && ! /usr/bin/python3 -c 'import jsonschema' 2>/dev/null; then
  python3 -m pip install --quiet jsonschema || python3 -m pip install --quiet --break-system-packages jsonschema
fi

# cuDNN's header-only C++ frontend (graph API: convolutions, fused SDPA attention), pinned, from NVIDIA's PyPI wheel
# (Debian has no package): the headers are unpacked under .deps/, which CMake finds. Only the CUDA build needs them.
cudnn_frontend_version=1.32.0
cudnn_frontend_dir=.deps/cudnn-frontend-$cudnn_frontend_version
if [[ -x /usr/local/cuda/bin/nvcc && ! -f $cudnn_frontend_dir/include/cudnn_frontend.h ]]; then
  echo "bootstrap: fetching cudnn-frontend $cudnn_frontend_version headers"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$tmp" \
    --platform manylinux_2_28_x86_64 --python-version 3.11 --implementation cp --abi cp311 \
    "nvidia-cudnn-frontend==$cudnn_frontend_version"
  python3 - "$tmp" "$cudnn_frontend_dir" <<'PY'
import glob, os, shutil, sys, zipfile
shutil.rmtree(sys.argv[2] + ".tmp", ignore_errors=True)
wheel = glob.glob(os.path.join(sys.argv[1], "*.whl"))[0]
with zipfile.ZipFile(wheel) as z:
    headers = [n for n in z.namelist() if n.startswith("include/")]
    z.extractall(sys.argv[2] + ".tmp", headers)
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
PY
fi

# The CUDA backend builds where nvcc is found (CUDA toolkit at /usr/local/cuda); without it the CPU build is made.
if [[ -x /usr/local/cuda/bin/nvcc ]]; then export PATH=/usr/local/cuda/bin:$PATH; fi

# shellcheck disable=SC2086
cmake -S . -B build -G Ninja ${BSW_CMAKE_ARGS:-} >/dev/null
cmake --build build -j "$(nproc)"
echo "bootstrap: built build/batchsweep"
