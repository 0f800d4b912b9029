# Sourced by scripts/test.sh: make sure the PostgreSQL tests have a server, or say why they skip.
#
# Contract: after `pg_for_tests`, either ORCH_TEST_DATABASE_URL names a reachable server (and
# ORCH_TEST_REQUIRE_POSTGRES=1, so the tests fail rather than skip if it then goes away), or it is unset and
# ORCH_TEST_POSTGRES_SKIP says why (the tests skip, printing it). A server this script started is a throwaway
# cluster in a temporary directory on a free 127.0.0.1 port; `pg_stop_throwaway` (called from test.sh's EXIT
# trap) stops it and removes the directory.
#   ORCH_TEST_DATABASE_URL   set by the caller: used as is, never replaced (a wrong URL then fails loudly).
#   ORCH_CI_PG_PROBE         host:port tried before starting one (default 127.0.0.1:5432).

_pg_throwaway_dir=""
_pg_throwaway_ctl=""
_pg_throwaway_user=""

_pg_reachable() {  # host port: does something accept TCP connections there?
  python3 - "$1" "$2" <<'EOF'
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2).close()
except OSError:
    sys.exit(1)
EOF
}

_pg_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

_pg_bindir() {  # the newest installed server's bin directory (Debian keeps them off PATH), or nothing
  local d
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && { echo "$d"; return 0; }
  done
  if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    dirname "$(command -v initdb)"
  fi
}

_pg_as() {  # run a command as the cluster's owner (initdb and postgres refuse to run as root)
  if [ "$(id -u)" = 0 ]; then
    runuser -u "$_pg_throwaway_user" -- "$@"
  else
    "$@"
  fi
}

pg_stop_throwaway() {
  if [ -n "$_pg_throwaway_dir" ]; then
    _pg_as "$_pg_throwaway_ctl" -D "$_pg_throwaway_dir/data" -m immediate -w stop >/dev/null 2>&1 || true
    rm -rf "$_pg_throwaway_dir"
    echo "test.sh: stopped the throwaway PostgreSQL" >&2
    _pg_throwaway_dir=""
  fi
}

_pg_skip() {
  unset ORCH_TEST_DATABASE_URL ORCH_TEST_REQUIRE_POSTGRES
  export ORCH_TEST_POSTGRES_SKIP="$1"
  echo "test.sh: the PostgreSQL tests will skip: $1" >&2
}

pg_for_tests() {
  if [ -n "${ORCH_TEST_DATABASE_URL:-}" ]; then
    export ORCH_TEST_REQUIRE_POSTGRES=1
    return 0
  fi
  local probe="${ORCH_CI_PG_PROBE:-127.0.0.1:5432}"
  if _pg_reachable "${probe%:*}" "${probe##*:}"; then
    export ORCH_TEST_DATABASE_URL="postgresql+psycopg://postgres@${probe}/postgres" ORCH_TEST_REQUIRE_POSTGRES=1
    echo "test.sh: PostgreSQL tests use the server on $probe" >&2
    return 0
  fi
  local bindir
  bindir="$(_pg_bindir)"
  if [ -z "$bindir" ]; then
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
      _pg_skip "no server on $probe, PostgreSQL is not installed, and installing it needs root and apt-get"
      return 0
    fi
    echo "test.sh: no server on $probe; installing Debian's postgresql for a throwaway cluster" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) || true
    bindir="$(_pg_bindir)"
    if [ -z "$bindir" ]; then
      _pg_skip "no server on $probe and apt-get could not install postgresql"
      return 0
    fi
  fi
  if [ "$(id -u)" = 0 ]; then
    if ! getent passwd postgres >/dev/null; then
      _pg_skip "no server on $probe, and no 'postgres' user to own a throwaway cluster (initdb refuses root)"
      return 0
    fi
    _pg_throwaway_user=postgres
  fi
  local port
  port="$(_pg_free_port)"
  _pg_throwaway_dir="$(mktemp -d /tmp/orch-test-pg.XXXXXX)"
  _pg_throwaway_ctl="$bindir/pg_ctl"
  [ -n "$_pg_throwaway_user" ] && chown "$_pg_throwaway_user" "$_pg_throwaway_dir"
  # Trust on 127.0.0.1 only, a superuser named postgres (the URL's user), the socket inside the temp dir.
  if ! _pg_as "$bindir/initdb" -D "$_pg_throwaway_dir/data" -U postgres -A trust -E UTF8 >"$_pg_throwaway_dir/initdb.log" 2>&1 \
    || ! _pg_as "$bindir/pg_ctl" -D "$_pg_throwaway_dir/data" -l "$_pg_throwaway_dir/server.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -p $port -k $_pg_throwaway_dir -c fsync=off -c max_connections=200" start >/dev/null; then
    cat "$_pg_throwaway_dir"/*.log >&2 2>/dev/null || true
    pg_stop_throwaway
    _pg_skip "no server on $probe and a throwaway cluster ($bindir) would not start (its log is above)"
    return 0
  fi
  export ORCH_TEST_DATABASE_URL="postgresql+psycopg://postgres@127.0.0.1:$port/postgres" ORCH_TEST_REQUIRE_POSTGRES=1
  echo "test.sh: no server on $probe; started a throwaway PostgreSQL on 127.0.0.1:$port (stopped at exit)" >&2
}
