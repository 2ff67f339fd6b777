#!/usr/bin/env bash
# Graph benchmark: Colonnade's DeepWalk/node2vec against gensim fed with
# Python walks (or the same walks), node classification of both, and a large
# generated graph over ps-shard processes (see bench/graph.py). Makes sure the
# system packages and the venv exist, builds the release binaries and the
# graph generator, then runs graph.py with the given arguments.
#
#   bench/graph.sh                                  # DeepWalk on 3 graphs + node2vec
#   bench/graph.sh --deepwalk blogcatalog --node2vec ''
#   bench/graph.sh --deepwalk '' --node2vec '' --big-nodes 10000000
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

"$repo/scripts/setup.sh"
cargo build --release --manifest-path "$repo/Cargo.toml"
cargo build --release --manifest-path "$repo/Cargo.toml" -p colonnade-graph --example powerlaw

exec "$repo/.venv/bin/python" "$repo/bench/graph.py" "$@"
