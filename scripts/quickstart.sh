#!/usr/bin/env bash
# The main job, from a fresh clone: installs what the build needs, builds, and
# trains word2vec on the sample corpus the repo ships (2.0M words of English
# Wikipedia) with an embedded PS shard (one column slice of all d columns:
# in one process a split only costs speed, docs/benchmarks.md), writing out/model.h5 plus
# the word2vec text and binary formats. Extra arguments go to `colonnade train`
# and override the defaults below (e.g. `./scripts/quickstart.sh --iter 1`).
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh
cargo build --release --workspace --bins
mkdir -p out
# Defaults as environment variables, so command-line flags override them.
export COLONNADE_SIZE=${COLONNADE_SIZE:-100} COLONNADE_WINDOW=${COLONNADE_WINDOW:-5} \
  COLONNADE_NEGATIVE=${COLONNADE_NEGATIVE:-5} COLONNADE_MIN_COUNT=${COLONNADE_MIN_COUNT:-5} \
  COLONNADE_SAMPLE=${COLONNADE_SAMPLE:-1e-4} COLONNADE_ITER=${COLONNADE_ITER:-3}
./target/release/colonnade train \
  --corpus testdata/sample.txt.xz \
  --embedded-shards 1 \
  --save-vocab out/vocab.tsv \
  --output out/model.h5 --output-text out/vectors.txt --output-binary out/vectors.bin \
  "$@"
echo "vectors written to out/model.h5 (HDF5), out/vectors.txt and out/vectors.bin (word2vec formats)"
