#!/usr/bin/env bash
# Soak benchmark (see bench/soak.py): 8 workers x 2 ps-shard processes on
# loopback for 10 minutes with mutual TLS, the bearer token, metrics and
# checkpoints on; every gRPC answer must be Ok and the shards' RSS is
# sampled every 10 s. Makes sure the system packages and the venv exist and
# builds the release binaries first. Run nothing else heavy meanwhile.
#
#   bench/soak.sh                          # the full soak
#   bench/soak.sh --minutes 1 --workers 2  # a quick look
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$repo/scripts/setup.sh"
cargo build --release --manifest-path "$repo/Cargo.toml"
exec "$repo/.venv/bin/python" "$repo/bench/soak.py" "$@"
