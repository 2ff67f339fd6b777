#!/usr/bin/env bash
# The main job, from a fresh clone: installs what the build needs, builds, and
# trains word2vec on the sample corpus the repo ships (2.0M words of English
# Wikipedia) with an embedded cluster of 2 PS shards, writing out/model.h5 plus
# the word2vec text and binary formats. Extra arguments go to `colonnade train`.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh
cargo build --release --workspace --bins
mkdir -p out
./target/release/colonnade train \
  --corpus testdata/sample.txt.xz \
  --embedded-shards 2 \
  --size 100 --window 5 --negative 5 --min-count 5 --sample 1e-4 --iter 3 \
  --save-vocab out/vocab.tsv \
  --output out/model.h5 --output-text out/vectors.txt --output-binary out/vectors.bin \
  "$@"
echo "vectors written to out/model.h5 (HDF5), out/vectors.txt and out/vectors.bin (word2vec formats)"
