#!/usr/bin/env bash
# Speed of `colonnade eval` and `colonnade similar` against gensim 4.4 on the
# same vectors, printed as a markdown snippet (plus the accuracies, so the
# parity is visible too).
#
#   bench/eval_speed.sh                 # train part01 (a few minutes), then time
#   bench/eval_speed.sh VECTORS         # reuse vectors (HDF5, word2vec text or binary)
#
# Timed, each as the best of $RUNS wall-clock runs (default 3; the machine is
# shared and noisy):
#   1. `colonnade eval` on questions-words.txt (restricted to the 30,000 most
#      frequent words, 3CosAdd and 3CosMul) plus WordSim-353: the whole
#      process, loading the vectors included;
#   2. `colonnade similar --k 30` for 1,000 words sampled from the vocabulary
#      (seeded), exact search over the whole vocabulary, whole process;
#   3. gensim: load_word2vec_format, evaluate_word_analogies(restrict_vocab=
#      30000, case_insensitive=True) (3CosAdd only) + evaluate_word_pairs, and
#      most_similar(topn=30) for the same 1,000 words; each call timed alone,
#      run once (it is slow).
# Environment: COLONNADE_BIN_DIR (default target/release), RUNS, WORK (a
# directory to keep the files in; default a temporary one), SKIP_GENSIM=1.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${COLONNADE_BIN_DIR:-$repo/target/release}"
py="$repo/.venv/bin/python"
data="$(cd "$repo/../shared/data" && pwd)"
questions="$data/eval/questions-words.txt"
ws353="$data/eval/wordsim353.tsv"
runs="${RUNS:-3}"
work="${WORK:-$(mktemp -d)}"
mkdir -p "$work"

for f in "$bin/colonnade" "$py" "$questions" "$ws353"; do
  [ -e "$f" ] || { echo "missing: $f (build with cargo build --release; set up with scripts/setup.sh)" >&2; exit 1; }
done

vectors="${1:-}"
if [ -z "$vectors" ]; then
  vectors="$work/p01.bin"
  if [ ! -s "$vectors" ]; then
    echo "training part01 into $vectors (a few minutes) ..." >&2
    "$bin/colonnade" train --corpus "$data/corpus/enwiki_text8style_part01.txt.xz" \
      --embedded-shards 2 --size 100 --iter 1 --min-count 5 --sample 1e-4 \
      --output-binary "$vectors" --output "$work/p01.h5" 2> "$work/train.log"
  fi
fi
[ -s "$vectors" ] || { echo "no vectors at $vectors" >&2; exit 1; }

# 1,000 query words, sampled with a fixed seed from the vectors' own vocabulary.
"$py" - "$vectors" "$work/queries.txt" <<'EOF'
import random, sys
import h5py
from gensim.models import KeyedVectors
path, out = sys.argv[1], sys.argv[2]
with open(path, "rb") as f:
    is_h5 = f.read(8) == b"\x89HDF\r\n\x1a\n"
if is_h5:
    with h5py.File(path, "r") as f:
        words = list(f["words"].asstr()[()])
else:
    try:
        words = KeyedVectors.load_word2vec_format(path, binary=True).index_to_key
    except Exception:
        words = KeyedVectors.load_word2vec_format(path, binary=False).index_to_key
random.seed(1)
with open(out, "w", encoding="utf-8") as f:
    f.write("\n".join(random.sample(words, min(1000, len(words)))) + "\n")
EOF

now() { date +%s.%N; }
# best_of CMD...: runs CMD $runs times (stdout to $work/out), prints the best wall time.
best_of() {
  local best="" s e t
  for _ in $(seq "$runs"); do
    s=$(now); "$@" > "$work/out" 2> "$work/err"; e=$(now)
    t=$(awk -v s="$s" -v e="$e" 'BEGIN { print e - s }')
    if [ -z "$best" ] || awk -v t="$t" -v b="$best" 'BEGIN { exit !(t < b) }'; then best=$t; fi
  done
  printf '%.2f' "$best"
}

eval_s=$(best_of "$bin/colonnade" eval --vectors "$vectors" --analogies "$questions" --similarity "$ws353" --json)
cp "$work/out" "$work/eval.json"
similar_s=$(best_of "$bin/colonnade" similar --vectors "$vectors" --queries "$work/queries.txt" --k 30)
similar_lines=$(($(wc -l < "$work/out") - 1))

read -r words dim add mul evaluated nquestions rho < <("$py" - "$work/eval.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
a, s = r["analogies"][0], r["similarity"][0]
print(r["vectors"]["words"], r["vectors"]["dim"], a["total"]["cos_add"]["accuracy"], a["total"]["cos_mul"]["accuracy"],
      a["total"]["evaluated"], a["total"]["questions"], s["spearman"])
EOF
)

g_load="n/a"; g_an="n/a"; g_ws="n/a"; g_sim="n/a"; g_add="n/a"; g_rho="n/a"
if [ "${SKIP_GENSIM:-0}" != 1 ]; then
  echo "timing gensim (evaluate_word_analogies takes minutes) ..." >&2
  read -r g_load g_an g_ws g_sim g_add g_rho < <("$py" - "$vectors" "$questions" "$ws353" "$work/queries.txt" <<'EOF'
import logging, sys, time
import h5py
from gensim.models import KeyedVectors
logging.disable(logging.INFO)
path, questions, ws353, queries = sys.argv[1:5]
t = time.perf_counter()
with open(path, "rb") as f:
    is_h5 = f.read(8) == b"\x89HDF\r\n\x1a\n"
if is_h5:
    with h5py.File(path, "r") as f:
        kv = KeyedVectors(f["vectors"].shape[1])
        kv.add_vectors(list(f["words"].asstr()[()]), f["vectors"][()])
else:
    try:
        kv = KeyedVectors.load_word2vec_format(path, binary=True)
    except Exception:
        kv = KeyedVectors.load_word2vec_format(path, binary=False)
kv.fill_norms()
load = time.perf_counter() - t
t = time.perf_counter()
score, _ = kv.evaluate_word_analogies(questions, restrict_vocab=30000, case_insensitive=True)
an = time.perf_counter() - t
t = time.perf_counter()
_, spearman, _ = kv.evaluate_word_pairs(ws353)
ws = time.perf_counter() - t
words = [w for w in open(queries, encoding="utf-8").read().split("\n") if w]
t = time.perf_counter()
for w in words:
    kv.most_similar(w, topn=30)
sim = time.perf_counter() - t
print(f"{load:.2f} {an:.2f} {ws:.2f} {sim:.2f} {score} {spearman[0]}")
EOF
)
fi

fmt() { "$py" -c "import sys; v=sys.argv[1]; print(v if v=='n/a' else f'{float(v)*100:.2f}%')" "$1"; }
fmt4() { "$py" -c "import sys; v=sys.argv[1]; print(v if v=='n/a' else f'{float(v):.4f}')" "$1"; }

cat <<EOF
### Evaluation speed: \`colonnade eval\` / \`similar\` vs gensim 4.4

Vectors: \`$(basename "$vectors")\`, $words words × $dim dims; $(nproc) cores; colonnade best of $runs runs, gensim once.

| task | colonnade | gensim 4.4 |
| --- | ---: | ---: |
| load vectors | (included below) | ${g_load} s |
| Google analogies ($nquestions questions, $evaluated within the 30K restriction) + WS-353 | ${eval_s} s (3CosAdd and 3CosMul, load included) | ${g_an} s (3CosAdd) + ${g_ws} s |
| 1,000 nearest-neighbour queries, k = 30, whole vocabulary | ${similar_s} s (load included; $similar_lines rows ≥ 0.65) | ${g_sim} s (\`most_similar\`, topn=30) |

| result | colonnade | gensim 4.4 |
| --- | ---: | ---: |
| analogies 3CosAdd | $(fmt "$add") | $(fmt "$g_add") |
| analogies 3CosMul | $(fmt "$mul") | |
| WS-353 Spearman ρ | $(fmt4 "$rho") | $(fmt4 "$g_rho") |
EOF
