#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs what the build needs
# (scripts/setup.sh), checks formatting and lints (cargo fmt --check, clippy
# -D warnings), builds the release binaries, runs the Rust tests
# (unit, property, integration with real shards on loopback), the Python tests
# that read our outputs with h5py and gensim, and the deployment checks.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh
cargo fmt --all -- --check
# --release: the proc-macros and build scripts it compiles are then the same
# artifacts the release build below uses (a dev-profile clippy compiled them twice).
cargo clippy --release --workspace --all-targets -- -D warnings
cargo build --release --workspace --bins
cargo nextest run --release --workspace --no-fail-fast
COLONNADE_BIN_DIR="$PWD/target/release" .venv/bin/python -m pytest -q tests/python
if [ -x scripts/validate-deploy.sh ]; then
  ./scripts/validate-deploy.sh
fi
if [ -x scripts/compose-test.sh ]; then
  ./scripts/compose-test.sh
fi
