#!/usr/bin/env bash
# Throughput and wire-efficiency benchmark: gensim 4.4, Colonnade with embedded
# shards and Colonnade with separate ps-shard processes, on the same corpus,
# settings and two cores (see bench/throughput.py for what is measured). Makes
# sure the system packages and the Python venv exist, builds the release
# binaries, then runs throughput.py with the given arguments. Works from any
# directory; relative paths in the arguments are taken from the current one.
#
#   bench/throughput.sh                                   # full run (part01, 5 epochs)
#   bench/throughput.sh --iter 1 --corpus testdata/sample.txt.xz
#   bench/throughput.sh --sweeps-only --sweep-iter 1 \
#       --minibatch-sweep 64,256,1024 --in-flight-sweep 1,2,4 --shards-sweep 1,2,4
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

"$repo/scripts/setup.sh"
cargo build --release --manifest-path "$repo/Cargo.toml"

# Recorded as the command line at the top of the report.
export COLONNADE_BENCH_ENTRY="bench/throughput.sh"
exec "$repo/.venv/bin/python" "$repo/bench/throughput.py" "$@"
