#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs what the build needs
# (scripts/setup.sh), checks formatting, unused dependencies and lints
# (cargo fmt --check, cargo machete, clippy -D warnings), builds the release binaries, runs the Rust tests
# (unit, property, integration with real shards on loopback), installs the
# Python package into .venv, runs the Python tests (they read our outputs with
# h5py and gensim, and drive the package), and the deployment checks.
set -euo pipefail
cd "$(dirname "$0")/.."

# The tests need optimised code, not link-time optimisation: with thin LTO
# every test binary re-generated the code of all its dependencies at link
# time (rlibs are kept as bitcode), which made building the ~30 test and
# binary targets take over 25 minutes on a 2-core machine. The same
# settings for every step below, so nothing is compiled twice; the main job
# and the benchmarks rebuild target/release with the workspace's profile.
export CARGO_PROFILE_RELEASE_LTO=false
export CARGO_PROFILE_RELEASE_DEBUG=false

# Each step's wall time goes to stderr, so a slow CI run says where it went.
step() {
  local start=$SECONDS
  "$@"
  echo "test.sh: $((SECONDS - start)) s: $*" >&2
}

step ./scripts/setup.sh
step cargo fmt --all -- --check
step cargo machete
# --release: the proc-macros and build scripts it compiles are then the same
# artifacts the release build below uses (a dev-profile clippy compiled them twice).
step cargo clippy --release --workspace --all-targets -- -D warnings
# --tests as well: nextest below then compiles nothing. The package's build
# (no dev-dependencies) reuses these artifacts and compiles only itself and
# pyo3 (~50 s): common/Cargo.toml turns on the features the dev-dependencies
# would otherwise add to the test build alone (serde, getrandom, regex, either).
step cargo build --release --workspace --bins --tests
step cargo nextest run --release --workspace --no-fail-fast
# The Python package (python/), built by maturin from the same target
# directory and profile, into the venv the Python tests run in.
PATH="$PWD/.venv/bin:$PATH" step .venv/bin/pip install -q --no-build-isolation --force-reinstall --no-deps ./python
COLONNADE_BIN_DIR="$PWD/target/release" step .venv/bin/python -m pytest -q --durations=15 tests/python
if [ -x scripts/validate-deploy.sh ]; then
  step ./scripts/validate-deploy.sh
fi
if [ -x scripts/compose-test.sh ]; then
  step ./scripts/compose-test.sh
fi
