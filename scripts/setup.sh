#!/usr/bin/env bash
# Installs everything trident needs on a fresh Debian 12 machine. Idempotent: a machine that
# already has every package does no network work.
set -euo pipefail
packages=(meson ninja-build pkg-config gcc g++ libyaml-dev libcmocka-dev libopenblas-dev libjansson-dev
          libpcre2-dev libutf8proc-dev libucx-dev ucx-utils fortunes python3-torch python3-numpy python3-venv iproute2
          openmpi-bin libopenmpi-dev chromium slurm-wlm munge
          zlib1g-dev libzstd-dev zstd)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The cuDNN frontend's headers for the CUDA build's cuDNN attention (opt-in; a build without
# them leaves it out): only where a CUDA toolkit is
if [ -x /usr/local/cuda/bin/nvcc ] || command -v nvcc >/dev/null 2>&1; then
  python3 "$(dirname "$0")/fetch_cudnn_frontend.py" ||
    echo "setup: WARNING: no cuDNN frontend headers: the CUDA build leaves cuDNN's attention out" >&2
fi
