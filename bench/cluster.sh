#!/usr/bin/env bash
# The cluster mode's CPU per token against the embedded mode, 2 ps-shard
# processes against gensim, and quality against minibatches in flight (see
# bench/cluster.py for what is measured). Makes sure the system packages and
# the Python venv exist, builds the release binaries, then runs cluster.py
# with the given arguments. Works from any directory.
#
#   bench/cluster.sh                                      # CPU table and in-flight sweep on part 01
#   bench/cluster.sh --old-bin-dir ../old/target/release  # the CPU table with an older build beside
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

"$repo/scripts/setup.sh"
cargo build --release --manifest-path "$repo/Cargo.toml"

export COLONNADE_BENCH_ENTRY="bench/cluster.sh"
exec "$repo/.venv/bin/python" "$repo/bench/cluster.py" "$@"
