#!/usr/bin/env bash
# Start (or stop) a throwaway PostgreSQL cluster on a loopback port, for the test suite.
#   eval "$(scripts/pg-throwaway.sh start)"   # exports HANDOFF_TEST_POSTGRES_URL and PG_THROWAWAY_DIR
#   scripts/pg-throwaway.sh stop "$PG_THROWAWAY_DIR"
# PostgreSQL refuses to run as root, so as root the server runs as the `postgres` user.
set -euo pipefail

find_bin() {
  local name=$1
  if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return; fi
  local candidate
  candidate=$(ls -d /usr/lib/postgresql/*/bin/"$name" 2>/dev/null | sort -V | tail -n 1 || true)
  [ -n "$candidate" ] || { echo "pg-throwaway: $name not found (apt-get install -y postgresql)" >&2; exit 1; }
  echo "$candidate"
}

as_owner() {
  if [ "$(id -u)" = "0" ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "${1:-}" in
  start)
    INITDB=$(find_bin initdb); PG_CTL=$(find_bin pg_ctl)
    PORT=${PG_THROWAWAY_PORT:-55432}
    while (echo >/dev/tcp/127.0.0.1/"$PORT") >/dev/null 2>&1; do PORT=$((PORT + 1)); done
    DIR=$(mktemp -d /tmp/handoff-pg.XXXXXX)
    chmod 755 "$DIR"
    [ "$(id -u)" = "0" ] && chown postgres "$DIR"
    as_owner "$INITDB" -D "$DIR/data" -A trust -U postgres >/dev/null
    as_owner "$PG_CTL" -D "$DIR/data" -w -o "-p $PORT -k $DIR -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300" \
      -l "$DIR/log" start >/dev/null
    echo "export PG_THROWAWAY_DIR=$DIR"
    echo "export HANDOFF_TEST_POSTGRES_URL=postgresql+asyncpg://postgres@127.0.0.1:$PORT/postgres"
    ;;
  stop)
    DIR=${2:?usage: pg-throwaway.sh stop DIR}
    PG_CTL=$(find_bin pg_ctl)
    as_owner "$PG_CTL" -D "$DIR/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$DIR"
    ;;
  *)
    echo "usage: $0 start | stop DIR" >&2; exit 2
    ;;
esac
