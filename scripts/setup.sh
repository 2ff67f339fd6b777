#!/usr/bin/env bash
# Installs everything Colonnade's build and tests need on a fresh Debian/Ubuntu
# machine: the C libraries the Rust crates link (HDF5), protoc for the gRPC
# code generation, and a Python venv (.venv) with the real readers the tests use
# (h5py, gensim, scikit-learn). Idempotent: a second run does nothing that is already done.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
for pkg in libhdf5-dev pkg-config protobuf-compiler xz-utils python3-venv; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  echo "setup: installing ${need_apt[*]}" >&2
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo is not installed; install Rust (https://rustup.rs) first" >&2
  exit 1
fi
if command -v rustup >/dev/null 2>&1; then
  for component in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$component" \
      || { echo "setup: installing $component" >&2; rustup component add "$component" >/dev/null; }
  done
fi
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "setup: installing cargo-nextest" >&2
  cargo install --locked cargo-nextest >/dev/null
fi
if ! cargo machete --version >/dev/null 2>&1; then
  echo "setup: installing cargo-machete (finds unused dependencies)" >&2
  cargo install --locked cargo-machete >/dev/null
fi

if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c "import gensim, h5py, pytest, sklearn, prometheus_client, maturin" >/dev/null 2>&1; then
  echo "setup: creating .venv with gensim, h5py, pytest, scikit-learn, prometheus-client, maturin" >&2
  python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip >/dev/null
  .venv/bin/pip install -q -r scripts/requirements.txt
fi
