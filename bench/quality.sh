#!/usr/bin/env bash
# Quality benchmark: Colonnade vs gensim 4.4 skip-gram on the same corpus and
# settings (see bench/quality.py for what is measured). Builds the release
# binaries, makes sure the Python venv exists, then runs quality.py with the
# given arguments. Works from any directory; relative paths in the arguments
# are taken from the current directory.
#
#   bench/quality.sh                                  # full run (part01, 5 epochs)
#   bench/quality.sh --iter 1 --corpus testdata/sample.txt.xz
#   bench/quality.sh --skip-gensim --minibatch-sweep 64,256,1024
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

"$repo/scripts/setup.sh"
cargo build --release --manifest-path "$repo/Cargo.toml"

exec "$repo/.venv/bin/python" "$repo/bench/quality.py" "$@"
