"""The PostgreSQL tests on a machine without PostgreSQL (issue 31): with no server they skip, saying why, unless
scripts/test.sh found or started one (then an unusable server fails them); scripts/test_postgres.sh starts a
throwaway cluster on a free port when nothing answers, and stops it after. Only 127.0.0.1 is touched; the
machine's own server (if any) is never stopped: the script is pointed at a closed port instead."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests import _store_db

ROOT = Path(__file__).resolve().parents[1]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_no_server_skips_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_store_db.PG_ENV, f"postgresql+psycopg://postgres@127.0.0.1:{_closed_port()}/postgres")
    monkeypatch.delenv(_store_db.PG_REQUIRE_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="not usable"):
        next(_store_db.pg_database())


def test_a_server_test_sh_promised_fails_when_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_store_db.PG_ENV, f"postgresql+psycopg://postgres@127.0.0.1:{_closed_port()}/postgres")
    monkeypatch.setenv(_store_db.PG_REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="not usable"):
        next(_store_db.pg_database())


def test_unset_url_skips_with_test_sh_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_store_db.PG_ENV, raising=False)
    monkeypatch.setenv(_store_db.PG_WHY_ENV, "no server on 127.0.0.1:5432 and no root")
    with pytest.raises(pytest.skip.Exception, match="no root"):
        next(_store_db.pg_database())


def _can_start_a_cluster() -> bool:
    bindirs = list(Path("/usr/lib/postgresql").glob("*/bin/initdb")) or shutil.which("initdb")
    return bool(bindirs) and (os.geteuid() != 0 or shutil.which("runuser") is not None)


@pytest.mark.skipif(not _can_start_a_cluster(), reason="no PostgreSQL server binaries (initdb) installed here")
def test_script_starts_a_throwaway_server_and_stops_it() -> None:
    probe = f"127.0.0.1:{_closed_port()}"
    check = (
        "import os, sqlalchemy as sa; url = os.environ['ORCH_TEST_DATABASE_URL'];"
        " e = sa.create_engine(url); print('URL', url);"
        " print('ANSWER', e.connect().execute(sa.text('select 41 + 1')).scalar())"
    )
    script = (
        "set -euo pipefail; . scripts/test_postgres.sh; trap pg_stop_throwaway EXIT; pg_for_tests;"
        f' echo "REQUIRE $ORCH_TEST_REQUIRE_POSTGRES"; {sys.executable} -c "$CHECK"'
    )
    env = {k: v for k, v in os.environ.items() if k != _store_db.PG_ENV}
    env.update(ORCH_CI_PG_PROBE=probe, CHECK=check)
    done = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "ANSWER 42" in done.stdout and "REQUIRE 1" in done.stdout
    assert f"no server on {probe}; started a throwaway PostgreSQL" in done.stderr
    assert "stopped the throwaway PostgreSQL" in done.stderr
    port = int(done.stdout.split("URL ")[1].split("@127.0.0.1:")[1].split("/")[0])
    with pytest.raises(OSError):  # stopped: nothing answers on its port any more
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
