#!/usr/bin/env bash
# End-to-end test of the docker-compose deployment on a real Docker engine:
# builds the images, makes the cluster's secrets (make-secrets.sh: a CA,
# certificates, tokens), starts S shards + M workers (default 3 + 2) with
# mutual TLS and the bearer token on a private network under a unique project
# name, trains on a slice of the enwiki corpus, exports HDF5 and checks it
# with h5py (shape, vocabulary, finite values, and nearest neighbours of a few
# obvious words). Mid-run it kills a shard container (`docker kill`, SIGKILL)
# once checkpoints exist: the shard comes back on its state volume and the
# workers must recover and finish (their summaries must report the recovery).
# Meanwhile it asks the cluster's Prometheus for the shards' Adjust counters:
# they must rise between scrapes, every shard must be up, and the workers'
# words must be seen. Afterwards, calls without the token, in plaintext or
# without a client certificate must be refused. Always tears everything down.
#
#   scripts/compose-test.sh
#
# Prints "compose-test: SKIP ..." and exits 0 when no Docker engine answers.
#
# Environment (all optional):
#   COLONNADE_TEST_SHARDS=3  COLONNADE_TEST_WORKERS=2
#   COLONNADE_TEST_BYTES=12000000   corpus slice (~2M words of text8-style text)
#   COLONNADE_TEST_CORPUS=...       .xz (or plain) corpus to slice
#   COLONNADE_TEST_TIMEOUT=1200     seconds for the whole cluster run
#   COLONNADE_SKIP_IMAGE_BUILD=1    reuse an existing colonnade:dev image
#   COLONNADE_SKIP_CARGO_BUILD=1    build the image from the binaries in target/release
#   COLONNADE_KEEP_TMP=1            keep the temporary directory (corpus, vocab, model.h5)
#   COLONNADE_TEST_KILL_SHARD=1     docker kill shard-1 mid-run (0: do not)
#
# Ctrl-C (SIGINT) or SIGTERM stops the run and still tears everything down.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
t_start=$(date +%s)

log() { printf 'compose-test: %s\n' "$*" >&2; }

if ! command -v docker >/dev/null 2>&1 || ! docker info >/dev/null 2>&1; then
  echo "compose-test: SKIP: no Docker engine answers (docker info failed); nothing was run"
  exit 0
fi
if command -v docker-compose >/dev/null 2>&1; then
  compose_bin=(docker-compose)
elif docker compose version >/dev/null 2>&1; then
  compose_bin=(docker compose)
else
  echo "compose-test: SKIP: neither docker-compose nor the docker compose plugin is installed"
  exit 0
fi

shards=${COLONNADE_TEST_SHARDS:-3}
workers=${COLONNADE_TEST_WORKERS:-2}
slice_bytes=${COLONNADE_TEST_BYTES:-12000000}
corpus_src=${COLONNADE_TEST_CORPUS:-$repo/../shared/data/corpus/enwiki_text8style_part01.txt.xz}
run_timeout=${COLONNADE_TEST_TIMEOUT:-1200}
image=${COLONNADE_IMAGE:-colonnade:dev}
export COLONNADE_IMAGE=$image

python=$repo/.venv/bin/python
if ! "$python" -c 'import h5py, numpy' >/dev/null 2>&1; then
  log "h5py is missing from $repo/.venv: run scripts/setup.sh first"
  exit 1
fi
[ -r "$corpus_src" ] || { log "corpus $corpus_src not found"; exit 1; }

project="colonnade-test-$$-$(date +%s)"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/colonnade-compose-test.XXXXXX")
compose_file=$repo/deploy/compose/docker-compose.yml
env_file=$repo/deploy/compose/.env
dc() { "${compose_bin[@]}" -p "$project" -f "$compose_file" --env-file "$env_file" "$@"; }

cleaned=0
cleanup() {
  local rc=$?
  [ "$cleaned" = 1 ] && return
  cleaned=1
  set +e
  log "tearing down project $project"
  dc down -v --remove-orphans --timeout 10 >/dev/null 2>&1
  # Anything compose did not remove (e.g. after an interrupted up).
  docker ps -aq --filter "label=com.docker.compose.project=$project" | xargs -r docker rm -f >/dev/null 2>&1
  docker network ls -q --filter "label=com.docker.compose.project=$project" | xargs -r docker network rm >/dev/null 2>&1
  docker volume ls -q --filter "label=com.docker.compose.project=$project" | xargs -r docker volume rm -f >/dev/null 2>&1
  left=$(docker ps -aq --filter "label=com.docker.compose.project=$project"; \
         docker network ls -q --filter "label=com.docker.compose.project=$project")
  [ -z "$left" ] || log "WARNING: left behind: $left"
  if [ "${COLONNADE_KEEP_TMP:-0}" = 1 ]; then
    log "kept $tmp"
  else
    rm -rf "$tmp"
  fi
  return "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# 1. The image.
if [ "${COLONNADE_SKIP_IMAGE_BUILD:-0}" = 1 ] && docker image inspect "$image" >/dev/null 2>&1; then
  log "reusing image $image"
else
  t0=$(date +%s)
  scripts/build-images.sh
  log "image built in $(($(date +%s) - t0)) s"
fi
image_size=$(docker image inspect -f '{{.Size}}' "$image")

# 2. The compose file for S shards and M workers (the checked-in one for 3 + 2).
if [ "$shards" != 3 ] || [ "$workers" != 2 ]; then
  compose_file=$tmp/docker-compose.yml
  deploy/compose/generate.sh "$shards" "$workers" "$compose_file"
fi

# 3. Corpus slice (whole lines) on a read-only mount, an output dir the
#    non-root containers can write.
mkdir -p "$tmp/data" "$tmp/out"
if [[ $corpus_src == *.xz ]]; then
  { xz -dc "$corpus_src" || true; } | head -c "$slice_bytes" | head -n -1 >"$tmp/data/corpus.txt"
else
  head -c "$slice_bytes" "$corpus_src" | head -n -1 >"$tmp/data/corpus.txt"
fi
corpus_words=$(wc -w <"$tmp/data/corpus.txt")
chmod 0755 "$tmp" "$tmp/data"
chmod 0644 "$tmp/data/corpus.txt"
if [ "$(id -u)" = 0 ]; then
  chown 65532:65532 "$tmp/out"
else
  export COLONNADE_UID COLONNADE_GID
  COLONNADE_UID=$(id -u)
  COLONNADE_GID=$(id -g)
fi
log "corpus slice: $corpus_words words ($(wc -c <"$tmp/data/corpus.txt") bytes)"

# The cluster's secrets, made by the script users run (from the image).
export COLONNADE_SECRETS_DIR=$tmp/secrets
deploy/compose/make-secrets.sh "$shards" "$COLONNADE_SECRETS_DIR" >&2
# Prometheus on a free port of the host's loopback.
COLONNADE_PROMETHEUS_PORT=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export COLONNADE_PROMETHEUS_PORT

# 4. Settings: small model, one epoch; 2 cores shared by everything.
export COLONNADE_DATA_DIR=$tmp/data
export COLONNADE_OUT_DIR=$tmp/out
export COLONNADE_CORPUS=/data/corpus.txt
export COLONNADE_VOCAB=/out/vocab.tsv
export COLONNADE_OUTPUT=/out/model.h5
export COLONNADE_SIZE=${COLONNADE_SIZE:-50}
export COLONNADE_ITER=${COLONNADE_ITER:-2}
export COLONNADE_CHECKPOINT_INTERVAL=${COLONNADE_CHECKPOINT_INTERVAL:-2}
kill_shard=${COLONNADE_TEST_KILL_SHARD:-1}
export COLONNADE_MIN_COUNT=${COLONNADE_MIN_COUNT:-5}
# word2vec's default --sample 1e-3 (deploy/compose/.env): it once made 2
# workers at 16 minibatches in flight diverge on this 2M-word slice, before
# the shards scaled steps by the calls pending on a row (docs/design.md,
# "Staleness across calls in flight").
export COLONNADE_SAMPLE=${COLONNADE_SAMPLE:-1e-3}
export COLONNADE_THREADS=${COLONNADE_THREADS:-2}
export COLONNADE_SHARD_THREADS=${COLONNADE_SHARD_THREADS:-1}
export COLONNADE_SHARD_MEM_LIMIT=${COLONNADE_SHARD_MEM_LIMIT:-1g}
export COLONNADE_CLIENT_MEM_LIMIT=${COLONNADE_CLIENT_MEM_LIMIT:-1g}
export RUST_LOG=${RUST_LOG:-info}

dc config -q

# 5. Run: shards (healthy) -> vocab -> workers -> exporter. `up -d` returns once
#    the exporter has been started; then wait for it.
log "project $project: $shards shards, $workers workers, size $COLONNADE_SIZE, iter $COLONNADE_ITER"
t_up=$(date +%s)
status=0
timeout --foreground "$run_timeout" "${compose_bin[@]}" -p "$project" -f "$compose_file" --env-file "$env_file" \
  up -d --no-build >"$tmp/up.log" 2>&1 &
up_pid=$!
# Ask Prometheus every 2 s, while the cluster runs, for the shards' Adjust
# calls, the shards it sees up and the words the workers read.
"$python" - "$COLONNADE_PROMETHEUS_PORT" "$tmp/prometheus.jsonl" "$tmp/prometheus.stop" <<'PY' &
import json, os, sys, time, urllib.parse, urllib.request
port, out, stop = sys.argv[1], sys.argv[2], sys.argv[3]
queries = {
    "adjust": 'sum(colonnade_shard_calls_total{method="Adjust",code="Ok"})',
    "shards_up": 'sum(up{job="colonnade-shards"})',
    "worker_words": 'sum(colonnade_client_words_total)',
}
with open(out, "a") as f:
    while not os.path.exists(stop):
        row = {"t": time.time()}
        for name, q in queries.items():
            url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
            try:
                with urllib.request.urlopen(url, timeout=3) as r:
                    result = json.load(r)["data"]["result"]
                row[name] = float(result[0]["value"][1]) if result else None
            except Exception as e:  # not up yet
                row[name] = None
        f.write(json.dumps(row) + "\n")
        f.flush()
        time.sleep(2)
PY
poller_pid=$!
killed=0
if [ "$kill_shard" = 1 ]; then
  # `up -d` returns only once the workers are done: kill meanwhile, once
  # shard-1 has written two checkpoints.
  for _ in $(seq 1 600); do
    n=$(dc logs --no-color shard-1 2>/dev/null | grep -c 'checkpoint taken' || true)
    if [ "${n:-0}" -ge 2 ]; then
      id=$(dc ps -q shard-1)
      log "docker kill shard-1 ($id) after $n checkpoints, $(($(date +%s) - t_up)) s into the run"
      docker kill "$id" >/dev/null
      killed=1
      sleep 3
      # The restart policy (unless-stopped) does not apply to a container
      # stopped by `docker kill` itself; an orchestrator (or the policy, for a
      # process that crashed) starts it again: do that here.
      if [ "$(docker inspect -f '{{.State.Running}}' "$id")" != true ]; then
        log "starting shard-1 again on its state volume"
        docker start "$id" >/dev/null
      fi
      break
    fi
    kill -0 "$up_pid" 2>/dev/null || break
    sleep 0.5
  done
  [ "$killed" = 1 ] || log "WARNING: training ended before shard-1 had two checkpoints; nothing was killed"
fi
wait "$up_pid" || status=$?
# The workers' last scrapes: one more interval before the poller stops.
sleep 6
touch "$tmp/prometheus.stop"
wait "$poller_pid" || true
if [ "$status" != 0 ]; then
  cat "$tmp/up.log" >&2
  dc logs --no-color --tail 40 >&2 || true
  log "FAIL: docker-compose up exited $status"
  exit 1
fi
exporter_id=$(dc ps -q exporter)
[ -n "$exporter_id" ] || { dc ps >&2; dc logs --no-color --tail 40 >&2; log "FAIL: no exporter container"; exit 1; }
remaining=$((run_timeout - ($(date +%s) - t_up)))
[ "$remaining" -gt 0 ] || remaining=1
export_rc=$(timeout --foreground "$remaining" docker wait "$exporter_id" || echo timeout)
t_done=$(date +%s)

ok=1
for svc in vocab $(seq -f 'worker-%g' 0 $((workers - 1))) exporter; do
  id=$(dc ps -q "$svc")
  code=$(docker inspect -f '{{.State.ExitCode}}' "$id" 2>/dev/null || echo missing)
  [ "$code" = 0 ] || { log "$svc exited with $code"; ok=0; }
done
for ((s = 0; s < shards; s++)); do
  h=$(docker inspect -f '{{.State.Health.Status}}' "$(dc ps -q "shard-$s")" 2>/dev/null || echo missing)
  [ "$h" = healthy ] || { log "shard-$s is $h"; ok=0; }
done
if [ "$export_rc" != 0 ] || [ "$ok" != 1 ]; then
  dc logs --no-color --tail 60 >&2 || true
  log "FAIL: exporter exit $export_rc"
  exit 1
fi
dc logs --no-color worker-0 2>&1 | grep -E 'model ready|training done|trained ' | sed 's/\x1b\[[0-9;]*m//g' | tail -3 >&2 || true

# Prometheus scraped the shards while they trained: their Adjust counters
# rose between scrapes, it saw every shard up and the workers' words.
"$python" - "$tmp/prometheus.jsonl" "$shards" <<'PY' || { dc logs --no-color --tail 30 prometheus >&2; exit 1; }
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
shards = int(sys.argv[2])
adjust = [r["adjust"] for r in rows if r.get("adjust") is not None]
rises = sum(1 for a, b in zip(adjust, adjust[1:]) if b > a)
up = max((r["shards_up"] or 0) for r in rows) if rows else 0
words = max((r["worker_words"] or 0) for r in rows) if rows else 0
print(f"compose-test: Prometheus: {len(rows)} queries, shards' Adjust calls {adjust[0] if adjust else None} -> "
      f"{adjust[-1] if adjust else None} ({rises} rises), up to {up:.0f}/{shards} shards up, "
      f"workers' words up to {words:.0f}")
if rises < 2 or up < shards or words <= 0:
    print("compose-test: FAIL: Prometheus did not see the shards' counters rise, every shard up and the "
          "workers' words", file=sys.stderr)
    sys.exit(1)
PY

# The shards serve mutual TLS and hold the cluster's token: a call without
# the token, one in plaintext and one without a client certificate are
# refused, each naming the shard and what is missing.
refused() {
  local what=$1 expect=$2 probe
  shift 2
  if probe=$(dc run --rm --no-deps -T "$@" --entrypoint /usr/local/bin/colonnade exporter \
    models list 2>&1); then
    log "FAIL: shard-0 served a call $what: $probe"
    exit 1
  fi
  echo "$probe" | grep -q "$expect" || { log "FAIL: a call $what: expected a refusal saying '$expect', got: $probe"; exit 1; }
  log "shard-0 refuses a call $what: $(echo "$probe" | grep "$expect" | tail -1)"
}
refused "without the token" "bearer token" -e COLONNADE_AUTH_TOKEN_FILE= -e COLONNADE_SHARDS=https://shard-0:50051
refused "in plaintext" "probably serves TLS" -e COLONNADE_TLS_CA= -e COLONNADE_TLS_CERT= -e COLONNADE_TLS_KEY= \
  -e COLONNADE_SHARDS=shard-0:50051
refused "without a client certificate" "client certificate" -e COLONNADE_TLS_CERT= -e COLONNADE_TLS_KEY= \
  -e COLONNADE_SHARDS=https://shard-0:50051

# 6. Check the exported HDF5 with h5py.
"$python" - "$tmp/out/model.h5" "$tmp/out/vocab.tsv" "$COLONNADE_SIZE" "$shards" "$tmp/out" "$killed" <<'PY'
import glob, json, sys
import h5py
import numpy as np

path, vocab_path, dim, shards, outdir = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
killed = sys.argv[6] == "1"
vocab, vocab_counts, vocab_fp = [], [], None
for line in open(vocab_path, encoding="utf-8"):
    line = line.rstrip("\n")
    if line.startswith("#"):  # "# colonnade vocabulary v1: ...; N words, fingerprint HEX"
        if "fingerprint" in line:
            vocab_fp = line.rsplit("fingerprint", 1)[1].strip()
        continue
    if line:
        word, count = line.split("\t")
        vocab.append(word)
        vocab_counts.append(int(count))
with h5py.File(path, "r") as f:
    vectors = f["vectors"][...]
    words = [w.decode() if isinstance(w, bytes) else str(w) for w in f["words"][...]]
    counts = f["counts"][...]
    attrs = dict(f.attrs)

def fail(msg):
    print(f"compose-test: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)

V = len(vocab)
if vectors.shape != (V, dim):
    fail(f"vectors shape {vectors.shape}, expected ({V}, {dim})")
if vectors.dtype != np.float32:
    fail(f"vectors dtype {vectors.dtype}")
if words != vocab:
    fail("words differ from vocab.tsv")
if counts.shape != (V,) or list(map(int, counts)) != vocab_counts:
    fail("counts differ from vocab.tsv")
if vocab_fp is not None and str(attrs.get("vocab_fingerprint", vocab_fp)) != vocab_fp:
    fail(f"vocab_fingerprint {attrs.get('vocab_fingerprint')} != {vocab_fp} of vocab.tsv")
if not np.isfinite(vectors).all():
    fail("non-finite values in vectors")
norms = np.linalg.norm(vectors, axis=1)
if (norms == 0).any():
    fail(f"{int((norms == 0).sum())} zero vectors")
if int(attrs.get("shards", shards)) != shards:
    fail(f"attribute shards={attrs.get('shards')}, expected {shards}")

unit = vectors / norms[:, None]
index = {w: i for i, w in enumerate(words)}

def neighbours(word, k=10):
    sims = unit @ unit[index[word]]
    return [words[i] for i in np.argsort(-sims)[: k + 1] if i != index[word]][:k]

numbers = {"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"}
months = {"january", "february", "march", "april", "may", "june", "july", "august",
          "september", "october", "november", "december"}
countries = {"germany", "italy", "spain", "england", "britain", "russia", "poland", "portugal",
             "netherlands", "belgium", "austria", "switzerland", "sweden", "greece", "india",
             "china", "japan", "canada", "ireland", "scotland", "egypt", "turkey", "denmark",
             "norway", "hungary", "mexico", "brazil", "australia", "europe", "prussia", "french"}
checks = [("three", numbers, 2), ("january", months, 3), ("france", countries, 1)]
problems = []
for word, group, need in checks:
    if word not in index:
        problems.append(f"{word!r} not in the vocabulary")
        continue
    near = neighbours(word)
    hits = [w for w in near if w in group]
    print(f"compose-test: neighbours of {word}: {' '.join(near)}  ({len(hits)} in group, need {need})")
    if len(hits) < need:
        problems.append(f"{word}: only {hits} among its top-10 neighbours")
if problems:
    fail("; ".join(problems))

tokens = seconds = 0.0
recoveries = 0
for s in sorted(glob.glob(f"{outdir}/train-summary-*.json")):
    j = json.load(open(s))
    tokens += j.get("tokens", 0)
    seconds = max(seconds, j.get("seconds", 0))
    recoveries += j.get("recoveries", 0)
if killed and recoveries < 1:
    fail("a shard was killed but no worker reports a recovery")
if killed:
    print(f"compose-test: shard-1 killed mid-run; workers recovered {recoveries} time(s) and finished")
print(f"compose-test: HDF5 ok: vocab {V} words, vectors {vectors.shape[0]}x{vectors.shape[1]} float32, all finite, "
      f"fingerprint {attrs.get('model_fingerprint')}, shards {attrs.get('shards')}")
if seconds:
    print(f"compose-test: workers trained {int(tokens)} words in {seconds:.1f} s ({tokens / seconds:.0f} words/s across workers)")
PY

t_end=$(date +%s)
printf 'compose-test: image %s %s bytes (%.1f MiB)\n' "$image" "$image_size" "$(awk -v s="$image_size" 'BEGIN { print s / 1048576 }')"
printf 'compose-test: cluster %d shards + %d workers on %d corpus words: up->export %d s; total wall time %d s\n' \
  "$shards" "$workers" "$corpus_words" "$((t_done - t_up))" "$((t_end - t_start))"
echo "compose-test: PASS"
