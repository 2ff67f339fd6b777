#!/usr/bin/env bash
# Multi-host simulation on one machine (see bench/netsim.py): shards and
# workers in their own network namespaces over tc-shaped virtual links. Needs
# root. Makes sure the system packages and the venv exist, builds the release
# binaries, then runs netsim.py with the given arguments.
#
#   bench/netsim.sh                                  # 10gbit and 1gbit, S 1,2,4 × W 1,2,4
#   bench/netsim.sh --links 1gbit:0.5ms --shards 2 --workers 1,2
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$repo/scripts/setup.sh"
cargo build --release --manifest-path "$repo/Cargo.toml"
exec "$repo/.venv/bin/python" "$repo/bench/netsim.py" "$@"
