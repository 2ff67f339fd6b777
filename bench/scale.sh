#!/usr/bin/env bash
# Scale benchmark (see bench/scale.py): V = 1M, 5M, 20M words from
# `colonnade synth`, every stage (vocab, encode, create + one epoch + export
# on 4 embedded shards and on 4 ps-shard processes, eval --groups) timed with
# its peak RSS, shard memory against the sizing formula, words/s against part
# 01 and against gensim at 5M in the same run; or, with --types-only N, the
# vocabulary of an N-type corpus under --memory-budget. Makes sure the system
# packages and the venv exist and builds the release binaries first. Run
# nothing else heavy meanwhile.
#
#   bench/scale.sh                                   # the full run
#   bench/scale.sh --words 1M,5M --gensim-words 5M
#   bench/scale.sh --words 5M,20M --skip-cluster --repeats 3   # ratios from medians of interleaved runs
#   bench/scale.sh --types-only 100M --memory-budget 4G
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$repo/scripts/setup.sh"
cargo build --release --manifest-path "$repo/Cargo.toml"
exec "$repo/.venv/bin/python" "$repo/bench/scale.py" "$@"
