#!/usr/bin/env bash
# Static checks of the deployment files (no cluster and no Docker engine needed):
#   - every manifest in deploy/k8s passes `kubernetes-validate --strict`
#     (against the newest schemas it ships and against Kubernetes 1.27, the
#     oldest version with GA gRPC probes that the manifests rely on);
#   - deploy/compose/docker-compose.yml (with its .env) passes
#     `docker-compose config -q`, is what `generate.sh 3 2` writes, and the
#     generator's output for other shard/worker counts is valid too;
#   - the shell scripts parse (and pass shellcheck when it is installed).
# Installs kubernetes-validate into .venv when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

fail=0
step() { printf '== %s\n' "$*"; }
bad() { printf 'validate-deploy: FAIL: %s\n' "$*" >&2; fail=1; }

# --- Kubernetes manifests ----------------------------------------------------
venv=$repo/.venv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
if [ ! -x "$venv/bin/kubernetes-validate" ]; then
  step "installing kubernetes-validate into .venv"
  "$venv/bin/pip" install -q 'kubernetes-validate>=1.30'
fi
kv=$venv/bin/kubernetes-validate
manifests=(deploy/k8s/*.yaml)
step "kubernetes-validate $("$kv" --version 2>/dev/null | tail -1) --strict: ${#manifests[@]} files"
"$kv" --strict "${manifests[@]}" || bad "kubernetes-validate --strict"
step "kubernetes-validate --strict -k 1.27.0"
"$kv" --strict --quiet -k 1.27.0 "${manifests[@]}" || bad "kubernetes-validate --strict -k 1.27.0"

# --- docker-compose ----------------------------------------------------------
if command -v docker-compose >/dev/null 2>&1; then
  compose=(docker-compose)
elif docker compose version >/dev/null 2>&1; then
  compose=(docker compose)
else
  compose=()
fi
cdir=deploy/compose
tmp=$(mktemp -d "${TMPDIR:-/tmp}/colonnade-validate.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

step "compose file and prometheus.yml are the output of generate.sh 3 2"
"$cdir/generate.sh" 3 2 "$tmp/expected.yml" "$tmp/expected-prometheus.yml" 2>/dev/null
diff -u "$cdir/docker-compose.yml" "$tmp/expected.yml" \
  || bad "$cdir/docker-compose.yml differs from 'generate.sh 3 2' (rerun: deploy/compose/generate.sh 3 2)"
diff -u "$cdir/prometheus.yml" "$tmp/expected-prometheus.yml" \
  || bad "$cdir/prometheus.yml differs from 'generate.sh 3 2' (rerun: deploy/compose/generate.sh 3 2)"

if [ ${#compose[@]} -eq 0 ]; then
  echo "validate-deploy: SKIP compose checks: neither docker-compose nor docker compose is installed"
else
  step "${compose[*]} config -q ($cdir/docker-compose.yml + .env)"
  "${compose[@]}" -f "$cdir/docker-compose.yml" --env-file "$cdir/.env" config -q \
    || bad "compose config of $cdir/docker-compose.yml"
  "${compose[@]}" -f "$cdir/docker-compose.yml" --env-file "$cdir/.env" config --services >"$tmp/services"
  want="exporter prometheus shard-0 shard-1 shard-2 vocab worker-0 worker-1"
  got=$(sort "$tmp/services" | tr '\n' ' ' | sed 's/ $//')
  [ "$got" = "$want" ] || bad "services are '$got', expected '$want'"
  for sm in "1 1" "5 4"; do
    # shellcheck disable=SC2086
    set -- $sm
    step "generate.sh $1 $2 -> ${compose[*]} config -q"
    "$cdir/generate.sh" "$1" "$2" "$tmp/docker-compose.yml" 2>/dev/null
    cp "$cdir/.env" "$tmp/.env"
    "${compose[@]}" -f "$tmp/docker-compose.yml" --env-file "$tmp/.env" config -q \
      || bad "compose config for $1 shards, $2 workers"
    n=$("${compose[@]}" -f "$tmp/docker-compose.yml" --env-file "$tmp/.env" config --services | wc -l)
    [ "$n" -eq $(($1 + $2 + 3)) ] || bad "generate.sh $1 $2 gave $n services"
  done
fi

# --- scripts -----------------------------------------------------------------
scripts=(scripts/build-images.sh scripts/compose-test.sh scripts/validate-deploy.sh deploy/compose/generate.sh
  deploy/compose/make-secrets.sh)
step "bash -n ${scripts[*]}"
for s in "${scripts[@]}"; do bash -n "$s" || bad "bash -n $s"; done
if command -v shellcheck >/dev/null 2>&1; then
  step "shellcheck"
  shellcheck "${scripts[@]}" || bad shellcheck
fi

if [ "$fail" = 0 ]; then
  echo "validate-deploy: OK"
else
  echo "validate-deploy: FAILED" >&2
  exit 1
fi
