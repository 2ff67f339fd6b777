#!/usr/bin/env bash
# Builds the Colonnade container image without any base image (no registry is
# needed): release binaries + exactly the shared libraries ldd lists for them +
# /etc/passwd with the non-root user 65532, on `FROM scratch`. Then the
# Prometheus image of the compose cluster, the same way, from the binary of
# Debian's `prometheus` package (downloaded with apt-get, not installed).
#
#   scripts/build-images.sh              # cargo build --release, then docker build
#
# Environment:
#   COLONNADE_IMAGE=colonnade:dev        image tag to build
#   COLONNADE_PROMETHEUS_IMAGE=colonnade-prometheus:dev
#   COLONNADE_SKIP_PROMETHEUS=1          build only the Colonnade image
#   COLONNADE_SKIP_CARGO_BUILD=1         use the binaries already in target/release
#   COLONNADE_IMAGE_STRIP=0              keep the debug line tables (bigger image)
#   CARGO_TARGET_DIR                     honoured, as cargo does
#
# One image holds all three binaries (they share every library, so splitting
# them would only duplicate layers):
#   /usr/local/bin/ps-shard          the parameter-server shard (gRPC :50051)
#   /usr/local/bin/colonnade         vocab | train | export | health (ENTRYPOINT)
#   /usr/local/bin/colonnade-export  standalone exporter
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

image=${COLONNADE_IMAGE:-colonnade:dev}
target_dir=${CARGO_TARGET_DIR:-$repo/target}
bins=(ps-shard colonnade colonnade-export)

log() { printf 'build-images: %s\n' "$*" >&2; }

if ! docker info >/dev/null 2>&1; then
  log "no Docker engine answers (docker info failed)"
  exit 2
fi

if [ "${COLONNADE_SKIP_CARGO_BUILD:-0}" != 1 ]; then
  log "cargo build --release (binaries: ${bins[*]})"
  cargo build --release --bins -p colonnade-ps-shard -p colonnade-client -p colonnade-exporter
fi
for b in "${bins[@]}"; do
  [ -x "$target_dir/release/$b" ] || { log "missing $target_dir/release/$b"; exit 1; }
done

ctx=$(mktemp -d "${TMPDIR:-/tmp}/colonnade-image.XXXXXX")
trap 'rm -rf "$ctx"' EXIT

# Copies the shared libraries the executables "$@" load (the program
# interpreter included), at the paths the host's loader resolves them to, into
# the root file system $root, and the loader configuration.
copy_libs() {
  local root=$1 out libs lib n=0
  shift
  libs=$(
    for b in "$@"; do
      out=$(ldd "$b")
      if grep -q 'not found' <<<"$out"; then
        log "unresolved libraries for $b:"; grep 'not found' <<<"$out" >&2; exit 1
      fi
      awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$out"
    done | sort -u
  )
  for lib in $libs; do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
    n=$((n + 1))
  done
  log "$n shared libraries copied"
  # Make sure the loader finds them even if its built-in search path differs.
  printf '/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n' >"$root/etc/ld.so.conf"
  if command -v ldconfig >/dev/null 2>&1; then
    ldconfig -r "$root" 2>/dev/null || log "ldconfig -r failed (the loader's default paths are used)"
  fi
}

# /etc/passwd, group and nsswitch.conf with root and the non-root user 65532.
write_etc() {
  local root=$1
  cat >"$root/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/sbin/nologin
nonroot:x:65532:65532:nonroot:/out:/sbin/nologin
PASSWD
  cat >"$root/etc/group" <<'GROUP'
root:x:0:
nonroot:x:65532:
GROUP
  cat >"$root/etc/nsswitch.conf" <<'NSS'
passwd: files
group:  files
hosts:  files dns
NSS
}

root=$ctx/rootfs
owned=$ctx/owned
mkdir -p "$root/usr/local/bin" "$root/etc" "$owned/data" "$owned/out" "$owned/tmp" "$owned/state"
chmod 0755 "$owned/data" "$owned/out" "$owned/state"
chmod 1777 "$owned/tmp"

# Binaries (debug line tables stripped unless asked; symbols stay for backtraces).
for b in "${bins[@]}"; do
  if [ "${COLONNADE_IMAGE_STRIP:-1}" = 1 ] && command -v strip >/dev/null 2>&1; then
    strip --strip-debug -o "$root/usr/local/bin/$b" "$target_dir/release/$b"
  else
    cp "$target_dir/release/$b" "$root/usr/local/bin/$b"
  fi
  chmod 0755 "$root/usr/local/bin/$b"
done

# Shared libraries, at the paths the dynamic loader resolves them to on the
# build host (the program interpreter included), found by ldd.
copy_libs "$root" "${bins[@]/#/$target_dir/release/}"
write_etc "$root"

cp deploy/docker/Dockerfile "$ctx/Dockerfile"
# The directories the non-root user writes to (or mounts over) belong to it.
cat >>"$ctx/Dockerfile" <<'EOF'

COPY --chown=65532:65532 owned/ /
EOF

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
revision=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
log "docker build -t $image (FROM scratch)"
docker build -q -t "$image" --build-arg "VERSION=${version:-dev}" --build-arg "REVISION=$revision" "$ctx" >/dev/null

# Smoke test: every binary starts in the image (no network).
for b in "${bins[@]}"; do
  docker run --rm --network none --entrypoint "/usr/local/bin/$b" "$image" --version >/dev/null \
    || { log "$b does not start inside $image"; exit 1; }
done
user=$(docker image inspect -f '{{.Config.User}}' "$image")
size=$(docker image inspect -f '{{.Size}}' "$image")
printf 'image %s: %s bytes (%s MiB), user %s, binaries: %s\n' \
  "$image" "$size" "$(awk -v s="$size" 'BEGIN { printf "%.1f", s / 1048576 }')" "$user" "${bins[*]}"

# The Prometheus image: Debian's package, unpacked (not installed).
[ "${COLONNADE_SKIP_PROMETHEUS:-0}" = 1 ] && exit 0
prom_image=${COLONNADE_PROMETHEUS_IMAGE:-colonnade-prometheus:dev}
debs=$target_dir/debs
mkdir -p "$debs"
if ! ls "$debs"/prometheus_*.deb >/dev/null 2>&1; then
  log "apt-get download prometheus (Debian's package; not installed)"
  if ! (cd "$debs" && apt-get download prometheus >/dev/null 2>&1); then
    # A machine whose package lists were never fetched.
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    (cd "$debs" && apt-get download prometheus >/dev/null)
  fi
fi
deb=$(ls "$debs"/prometheus_*.deb | tail -1)
pctx=$ctx/prometheus
mkdir -p "$pctx/deb" "$pctx/rootfs/usr/bin" "$pctx/rootfs/etc/prometheus" "$pctx/owned/prometheus"
dpkg-deb -x "$deb" "$pctx/deb"
cp "$pctx/deb/usr/bin/prometheus" "$pctx/rootfs/usr/bin/prometheus"
copy_libs "$pctx/rootfs" "$pctx/rootfs/usr/bin/prometheus"
write_etc "$pctx/rootfs"
prom_version=$(dpkg-deb -f "$deb" Version)
cp deploy/docker/Dockerfile.prometheus "$pctx/Dockerfile"
log "docker build -t $prom_image (FROM scratch, prometheus $prom_version)"
docker build -q -t "$prom_image" --build-arg "VERSION=$prom_version" "$pctx" >/dev/null
docker run --rm --network none "$prom_image" --version >/dev/null \
  || { log "prometheus does not start inside $prom_image"; exit 1; }
size=$(docker image inspect -f '{{.Size}}' "$prom_image")
printf 'image %s: %s bytes (%s MiB), prometheus %s\n' \
  "$prom_image" "$size" "$(awk -v s="$size" 'BEGIN { printf "%.1f", s / 1048576 }')" "$prom_version"
