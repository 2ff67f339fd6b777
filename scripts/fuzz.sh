#!/usr/bin/env bash
# Fuzzes the shard's request decoding and validation on stable Rust
# (ps-shard/tests/fuzz.rs, a module of the shard's integration test binary):
# CASES arbitrary and mutated requests (default 2,000,000; CI runs 20,000)
# through the service as tonic hands them over.
# Fails on any handler panic or on a rejected adjust that changed the model;
# prints the answers by call and code, the time and the peak RSS of the run.
#
#   scripts/fuzz.sh [CASES]
set -euo pipefail
cd "$(dirname "$0")/.."
cases="${1:-2000000}"
cargo build --release -p colonnade-ps-shard --tests >/dev/null 2>&1 || true
bin=$(cargo test --release -p colonnade-ps-shard --test integration --no-run --message-format json 2>/dev/null \
  | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("target", {}).get("name") == "integration" and m.get("executable"):
        print(m["executable"])')
[ -n "$bin" ] || { echo "fuzz.sh: could not build the shard's integration tests" >&2; exit 1; }
echo "fuzz.sh: $cases cases, $(git rev-parse --short HEAD), $(date -u '+%Y-%m-%d %H:%M UTC')"
COLONNADE_FUZZ_CASES="$cases" python3 - "$bin" <<'PY'
import resource, subprocess, sys, time
t = time.monotonic()
rc = subprocess.call([sys.argv[1], "fuzz::", "--nocapture", "--test-threads", "1"])
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"fuzz.sh: exit {rc}, {time.monotonic() - t:.1f} s wall, {ru.ru_utime + ru.ru_stime:.1f} s CPU, "
      f"peak RSS {ru.ru_maxrss / 1024:.1f} MiB")
sys.exit(rc)
PY
