#!/usr/bin/env bash
# Installs vitddp_tools (results/pyproject.toml) into a virtual environment that sees the system's
# numpy, h5py, matplotlib and pytest (Debian: python3-numpy, -h5py, -matplotlib, -pytest), without
# touching the externally managed system Python:
#   python3 -m venv --system-site-packages --without-pip VENV  (pip comes from the system's site)
#   VENV/bin/python -m pip install --no-deps --no-build-isolation --no-index SRC
# offline with the system's setuptools and wheel (python3-setuptools, python3-wheel come with
# python3-pip); where those are missing it falls back to pip's isolated build (PyPI).
# The package is built from a copy of SRC, so the source tree gets no build/ or .egg-info.
# Usage: install_tools.sh PYTHON3 RESULTS_DIR VENV_DIR
set -euo pipefail
PY=$1
SRC=$2
VENV=$3
COPY=$(mktemp -d)
trap 'rm -rf "$COPY"' EXIT
cp "$SRC/pyproject.toml" "$COPY/"
cp -r "$SRC/vitddp_tools" "$COPY/"
find "$COPY" -name __pycache__ -prune -exec rm -rf {} +
"$PY" -m venv --system-site-packages --without-pip --clear "$VENV"
"$VENV/bin/python" -c 'import numpy, h5py, matplotlib, pip' 2>/dev/null || {
  echo "install_tools.sh: $PY lacks numpy, h5py, matplotlib or pip (Debian: python3-numpy python3-h5py python3-matplotlib python3-pip)" >&2
  exit 1
}
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps)
if ! "${PIP[@]}" --no-build-isolation --no-index "$COPY" 2>"$COPY/offline.log"; then
  echo "install_tools.sh: the offline build failed ($(tail -1 "$COPY/offline.log")); building with pip's isolated build" >&2
  "${PIP[@]}" "$COPY"
fi
"$VENV/bin/vitddp-report" --help >/dev/null
"$VENV/bin/vitddp-plot" --help >/dev/null
echo "vitddp_tools installed into $VENV ($("$VENV/bin/python" -c 'import vitddp_tools; print(vitddp_tools.__file__)'))"
