#!/usr/bin/env bash
# Makes the compose cluster's secrets with `colonnade certs`, run from the
# image (no Rust toolchain needed): a private CA, one certificate for the
# shards naming shard-0 .. shard-(S-1), a client certificate for workers and
# the exporter, the bearer token and the admin token.
#
#   deploy/compose/make-secrets.sh [S] [DIR]
#     S    shards (default 3: the names the shard certificate lists)
#     DIR  where to write (default: $COLONNADE_SECRETS_DIR, else ./secrets
#          beside this script). An existing set is not overwritten: to rotate,
#          write a new directory and point COLONNADE_SECRETS_DIR at it
#          (docs/deploy.md).
#
# The keys are readable only by their owner, and the containers run as
# COLONNADE_UID:COLONNADE_GID (65532 unless set): run this as root (the files
# then belong to that uid), or as the user the containers run as.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
shards=${1:-3}
dir=${2:-${COLONNADE_SECRETS_DIR:-$here/secrets}}
image=${COLONNADE_IMAGE:-colonnade:dev}
uid=${COLONNADE_UID:-65532}
gid=${COLONNADE_GID:-65532}

case "$shards" in
  '' | *[!0-9]*) echo "usage: $0 [SHARDS] [DIR]" >&2; exit 2 ;;
esac
hosts=""
for ((s = 0; s < shards; s++)); do
  hosts+="${hosts:+,}shard-$s"
done

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
if [ "$(id -u)" = 0 ]; then
  chown "$uid:$gid" "$dir"
elif [ "$(id -u)" != "$uid" ]; then
  echo "make-secrets.sh: the containers run as uid $uid, which could not read keys made by uid $(id -u):" >&2
  echo "  run this as root, or set COLONNADE_UID=$(id -u) COLONNADE_GID=$(id -g) (here and in .env)" >&2
  exit 2
fi
docker run --rm --network none --user "$uid:$gid" -v "$dir:/secrets" \
  --entrypoint /usr/local/bin/colonnade "$image" certs --out /secrets --hosts "$hosts"
