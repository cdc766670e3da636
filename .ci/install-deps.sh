#!/usr/bin/env bash
# Installs what vitddp needs on Debian 12 (CI and developer machines). The CUDA toolkit with
# cuBLASLt, cuDNN, NCCL and NVTX3 is expected under /usr/local/cuda (it is on the project's
# machines); everything else comes from Debian's packages.
set -euo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  cmake ninja-build g++ make git \
  libopenmpi-dev openmpi-bin \
  libhdf5-dev hdf5-tools zlib1g-dev \
  catch2 \
  dataset-fashion-mnist \
  python3 python3-h5py python3-numpy python3-matplotlib >/dev/null
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "note: add /usr/local/cuda/bin to PATH (nvcc)"
fi
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || {
  echo "error: the CUDA toolkit (nvcc, cuBLASLt, cuDNN, NCCL) is required under /usr/local/cuda" >&2; exit 1; }
echo "dependencies installed"
