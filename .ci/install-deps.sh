#!/usr/bin/env bash
# Installs what vitddp needs on Debian 12 (CI and developer machines). The CUDA toolkit with
# cuBLASLt, cuDNN, NCCL and NVTX3 is expected under /usr/local/cuda (it is on the project's
# machines); everything else comes from Debian's packages, except cuDNN's C++ frontend headers
# (PyPI, below).
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
  python3 python3-pip python3-h5py python3-numpy python3-matplotlib python3-pytest >/dev/null
# cuDNN's header-only C++ frontend (cudnn_frontend.h, MIT) comes in the PyPI wheel
# nvidia-cudnn-frontend; only its include/ is used (CMakeLists.txt looks in /opt/cudnn-frontend).
# --target keeps it out of Debian's externally managed Python; --no-deps skips its Python-only
# dependencies; the platform flags pick the one binary wheel whatever the local Python.
CUDNN_FE_VERSION=1.32.0
CUDNN_FE_DIR=/opt/cudnn-frontend
if [ ! -d "$CUDNN_FE_DIR/nvidia_cudnn_frontend-$CUDNN_FE_VERSION.dist-info" ]; then
  $SUDO rm -rf "$CUDNN_FE_DIR"
  $SUDO /usr/bin/python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-deps --only-binary=:all: \
    --python-version 3.11 --implementation cp --platform manylinux_2_28_x86_64 \
    --target "$CUDNN_FE_DIR" "nvidia-cudnn-frontend==$CUDNN_FE_VERSION"
fi
[ -f "$CUDNN_FE_DIR/include/cudnn_frontend.h" ] || {
  echo "error: cudnn_frontend.h missing under $CUDNN_FE_DIR/include after the pip install" >&2; exit 1; }
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "note: add /usr/local/cuda/bin to PATH (nvcc)"
fi
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] ||
  echo "note: no CUDA toolkit under /usr/local/cuda: CMake builds the CPU backend alone (the GPU backend needs nvcc, cuBLASLt, cuDNN and NCCL there)"
echo "dependencies installed"
