#!/usr/bin/env bash
# Fault-tolerance benchmark (see bench/fault.py): a run with a shard killed
# (SIGKILL) half-way and restarted, against the same run uninterrupted, on
# part 01 (analogy and WS-353 of both), and what checkpoints cost (pause,
# write time, bytes) for part 01 and a larger synthetic model. Makes sure the
# system packages and the venv exist and builds the release binaries first.
#
#   bench/fault.sh                                   # full run (part01, 3 epochs)
#   bench/fault.sh --corpus testdata/sample.txt.xz --iter 2 --interval 5 --skip-large
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$repo/scripts/setup.sh"
cargo build --release --manifest-path "$repo/Cargo.toml"
exec "$repo/.venv/bin/python" "$repo/bench/fault.py" "$@"
