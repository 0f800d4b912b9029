#!/usr/bin/env bash
# Install orch with its test extras into .venv and run the whole suite. README's test command.
set -euo pipefail
cd "$(dirname "$0")/.."
# System tools the tests use: an OpenSSH server (SSH provider, e2e), rclone (checkpoint uploads), a browser.
need=()
command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)
command -v /usr/sbin/sshd >/dev/null 2>&1 || need+=(openssh-server)
command -v rclone >/dev/null 2>&1 || need+=(rclone)
# Debian's chromium and its driver: the web console's browser tests (they skip, saying so, without them).
[ -x /usr/bin/chromium ] || need+=(chromium)
[ -x /usr/bin/chromedriver ] || need+=(chromium-driver)
if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null) \
    || echo "warning: could not install ${need[*]}; tests needing them will skip" >&2
fi
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# torch 2.13.0: a CPU wheel lies on the CI machines; the e2e tests skip where it cannot be had.
.venv/bin/python -m pip install -q -e ".[dev]"
.venv/bin/python -m pip install -q "torch==2.13.0" || echo "warning: torch not installed; e2e tests will skip" >&2
.venv/bin/ruff check .
# ORCH_CHECK_FLOORS=1: also prove pyproject's lower bounds (a scratch venv at the floors; a few minutes).
if [ "${ORCH_CHECK_FLOORS:-}" = 1 ]; then
  scripts/check_floors.sh
fi
# The PostgreSQL tests: the server of $ORCH_TEST_DATABASE_URL, else one on 127.0.0.1:5432, else a throwaway
# cluster started here (installing Debian's postgresql as root) and stopped at exit; else they skip, saying why.
. scripts/test_postgres.sh
trap pg_stop_throwaway EXIT
pg_for_tests
# Bytecode compiled once: the suite starts hundreds of fresh orch processes, and where PYTHONDONTWRITEBYTECODE
# is set (CI machines set it) each would compile orchestrator/ and providers/ from source again (~0.6 s CPU).
.venv/bin/python -m compileall -q -j 2 orchestrator providers tests examples >/dev/null
# Two workers, whole files each (module fixtures, servers and databases stay per file): 6.5-11 min on 2 cores
# by the machine (docs/testing.md).
# --no-loadscope-reorder: the files in tests/conftest.py's order, those with a test marked slow first, so the
# long files do not come last for one worker alone (xdist's own order is most tests first).
# Not exec: the EXIT trap must still stop a throwaway server after pytest.
.venv/bin/python -m pytest -q -p no:cacheprovider -n 2 --dist loadfile --no-loadscope-reorder "$@"
