#!/usr/bin/env bash
# Quality by word frequency (bench/buckets.py), Colonnade against gensim at
# the same settings: trains `colonnade train` (embedded, its defaults, 2
# threads) and gensim (sg=1, workers=2) with seeds 1 and 2 on one corpus,
# then reports similarity, analogies and neighbour agreement per frequency
# bucket of the rarest word. Settings by environment: CORPUS (part 01),
# ITER (3), ALPHA (0.025), THREADS (Colonnade's, 2; gensim's stay 2),
# SAMPLE (1e-4), SEEDS ("1 2"), CBOW=1 (both train CBOW: gensim sg=0,
# cbow_mean=1; give it a WORK of its own, as its gensim vectors are CBOW's),
# WORK (a new temporary directory, kept), COLONNADE_ARGS (extra
# `colonnade train` flags, e.g. "--minibatch 64"), TAG (colonnade: the name
# of its files in WORK), SKIP_GENSIM=1 (reuse WORK's gensim vectors),
# BIN_DIR (a directory holding a built `colonnade`, used as it is; without
# it the script builds the release profile, which rebuilds everything when
# the last build used other profile settings, e.g. LTO off).
#
#   bench/buckets.sh
#   BIN_DIR=target/release ITER=5 bench/buckets.sh
#   WORK=/tmp/b THREADS=1 COLONNADE_ARGS="--minibatch 16" TAG=t1 SKIP_GENSIM=1 bench/buckets.sh
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
corpus=${CORPUS:-$repo/../shared/data/corpus/enwiki_text8style_part01.txt.xz}
iter=${ITER:-3}
sample=${SAMPLE:-1e-4}
seeds=${SEEDS:-1 2}
tag=${TAG:-colonnade}
work=${WORK:-$(mktemp -d /tmp/colonnade-buckets-XXXXXX)}
mkdir -p "$work"
"$repo/scripts/setup.sh"
if [ -n "${BIN_DIR:-}" ]; then
  [ -x "$BIN_DIR/colonnade" ] || { echo "buckets.sh: BIN_DIR=$BIN_DIR holds no executable colonnade" >&2; exit 2; }
  bin="$(realpath "$BIN_DIR/colonnade")"
else
  cargo build --release --manifest-path "$repo/Cargo.toml" --bin colonnade
  bin="$repo/target/release/colonnade"
fi
py="$repo/.venv/bin/python"
flags=(--size 100 --window 5 --negative 5 --min-count 5 --sample "$sample" --alpha "${ALPHA:-0.025}" --iter "$iter")
if [ "${CBOW:-0}" = 1 ]; then flags+=(--cbow); fi
[ -f "$work/corpus.txt" ] || xz -dc "$corpus" > "$work/corpus.txt"
[ -f "$work/vocab.tsv" ] || "$bin" vocab --corpus "$work/corpus.txt" --min-count 5 --output "$work/vocab.tsv"
models=() agree=()
for seed in $seeds; do
  # shellcheck disable=SC2086
  "$bin" train --corpus "$work/corpus.txt" --vocab "$work/vocab.tsv" "${flags[@]}" --threads "${THREADS:-2}" --seed "$seed" \
    ${COLONNADE_ARGS:-} --output-binary "$work/$tag-$seed.bin" --output "$work/$tag-$seed.h5" \
    > "$work/$tag-$seed.log" 2>&1
  if [ "${SKIP_GENSIM:-0}" != 1 ] || [ ! -f "$work/gensim-$seed.bin" ]; then
    "$py" "$repo/bench/_common.py" --gensim-worker-corpus "$work/corpus.txt" \
      --gensim-worker-out "$work/gensim-$seed.bin" --gensim-worker-result "$work/gensim-$seed.json" \
      "${flags[@]}" --threads 2 --seed "$seed" > "$work/gensim-$seed.log" 2>&1
  fi
  models+=(--model "c$seed=$work/$tag-$seed.bin" --model "g$seed=$work/gensim-$seed.bin")
  agree+=(--agree "c$seed:g$seed")
done
set -- $seeds
if [ $# -ge 2 ]; then agree=(--agree "g$1:g$2" --agree "c$1:c$2" "${agree[@]}"); fi
echo "work: $work ($(date -u +%FT%TZ), colonnade $("$bin" --version), threads ${THREADS:-2} ${flags[*]} ${COLONNADE_ARGS:-})"
"$py" "$repo/bench/buckets.py" --vocab "$work/vocab.tsv" "${models[@]}" "${agree[@]}" \
  --out "$repo/bench/results/buckets-$(date -u +%Y%m%dT%H%M%S).json"
