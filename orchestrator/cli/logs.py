"""``orch logs JOB [-f] [--node N]``: a job's output (orchestrator/app/logs.py).

From the job's store, where its agent ships it (so logs outlive the machine), else over SSH from a machine
orch can reach. Exit 1 with a clear line when there is nothing to read. Heavy imports inside the command.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.cli.common import fail_store
from orchestrator.cli.errors import EXIT_BAD_INPUT, EXIT_NO_MATCH, MIN_POLL_S, check_number, fail
from orchestrator.cli.main import app

if TYPE_CHECKING:
    from collections.abc import Callable

    from orchestrator.app.logs import LogSource
    from orchestrator.config.file import OrchConfig
    from orchestrator.daemon.service_settings import ServiceSettings


@app.command("logs")
def logs_cmd(
    job: Annotated[str, typer.Argument(help="The job's name.", show_default=False)],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new output until the job's machine "
                                         "ends (Ctrl-C stops).")] = False,
    node: Annotated[int, typer.Option("--node", help="Which node of a multi-node job (its rank).")] = 0,
    poll: Annotated[float, typer.Option("--poll", help="With -f: seconds between reads.")] = 2.0,
    max_wait: Annotated[float | None, typer.Option("--max-wait", help="With -f: stop after this many seconds "
                                                   "without new output.")] = None,
) -> None:
    """The job's output (stdout and stderr) on its latest machine, from its store or over SSH."""
    from orchestrator.app.logs import LogsError, Via, follow_log, log_source
    from orchestrator.config.errors import ConfigError
    from orchestrator.config.file import load_config
    from orchestrator.daemon.service_settings import load_service_settings
    from orchestrator.store import StoreError, open_store

    if node < 0:
        fail("--node must be 0 or more", EXIT_BAD_INPUT)
    check_number("--poll", poll, low=MIN_POLL_S, high=3600)
    check_number("--max-wait", max_wait, low=0, high=365 * 86400)
    try:
        config = load_config()
        settings = load_service_settings(config)
    except ConfigError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    try:
        store = open_store()
    except StoreError as exc:
        fail_store(exc)
    try:
        _say_failure(store, job)
        source = log_source(store, job, node, settings.state_store)
        read = _reader(source, config, settings)
        first = read(0)
        if not first and not follow:
            fail(f"no output from job {job!r} node {node} yet (launch {source.launch_id}; "
                 f"{'its agent has shipped none' if source.via is Via.STORE else 'job.log is empty'})",
                 EXIT_NO_MATCH)
        _write(first)
        if follow:
            def running() -> bool:
                return log_source(store, job, node, settings.state_store).attempt_live

            try:
                for data in follow_log(read, running, start=len(first), poll_s=poll, max_wait_s=max_wait):
                    _write(data)
            except KeyboardInterrupt:
                pass
    except LogsError as exc:
        fail(str(exc), EXIT_NO_MATCH)
    except OSError as exc:
        fail(f"cannot read the logs of {job!r}: {exc}", EXIT_NO_MATCH)
    finally:
        store.close()


def _say_failure(store: object, job: str) -> None:
    """A failed (or waiting) job's typed cause, the first line of its node's words and the fix, on stderr
    before its output (which stays stdout's alone), in 80 columns: each goes on in lines indented under it."""
    from orchestrator.app.status import job_failure

    failure = job_failure(store, job)      # type: ignore[arg-type]
    if failure is not None:
        from orchestrator.cli.errors import wrap
        from orchestrator.redaction import safe_line

        # safe_line first: the node's words are escaped (and redacted) before the width is counted.
        said = wrap(safe_line(f"orch: job {job}: cause {failure.headline()}"), _UNDER)
        sys.stderr.write(f"{said}\n{wrap(f'orch: fix: {failure.cause.fix}', _UNDER)}\n")


#: Where the cause and fix lines go on: past "orch: ", so each reads as one block under its first line.
_UNDER = " " * 6


def _write(data: bytes) -> None:
    sys.stdout.buffer.write(data)
    sys.stdout.flush()


def _reader(source: LogSource, config: OrchConfig, settings: ServiceSettings) -> Callable[[int], bytes]:
    from orchestrator.app.logs import Via, read_log, store_client

    if source.via is Via.STORE:
        client = store_client(source, settings.store_endpoint)
        return lambda start: read_log(client, start)
    return _ssh_reader(source, config, settings)


def _ssh_reader(source: LogSource, config: OrchConfig, settings: ServiceSettings) -> Callable[[int], bytes]:
    """job.log from the machine itself, over orch's SSH transport (SSH-provider hosts, or orch's key)."""
    from pathlib import Path

    from orchestrator.app.logs import LogsError
    from orchestrator.config.file import data_dir
    from orchestrator.config.providers import build_providers
    from orchestrator.runtime.transport_pool import TransportPool
    from providers.ssh.errors import TransportError
    from providers.ssh.hostkeys import HostKeyStore

    providers = build_providers(config)
    provider = providers.get(source.provider)
    inst = provider.get(source.instance_id) if provider is not None else None
    if inst is None:
        raise LogsError(f"job {source.job!r} keeps no logs in a store and its machine "
                        f"{source.provider} {source.instance_id} is gone")
    key = Path(settings.ssh_private_key).expanduser() if settings.ssh_private_key else None
    pool = TransportPool(providers, key_path=key, host_keys=HostKeyStore(data_dir() / "known_hosts") if key else None)
    path = f".orch/jobs/{source.job}/job.log"

    # What makes output readable, for jobs launched from now on (a running agent keeps the channel it booted with).
    fix = "" if key is not None else (
        " (hint: set daemon.state_store, or a checkpoint store in the manifest, and the jobs launched from then on "
        "ship their output there; or daemon.ssh_private_key)")

    def read(start: int) -> bytes:
        try:
            return pool.get(inst).get(path)[start:]
        except TransportError as exc:
            raise LogsError(f"job {source.job!r}: its machine is not reachable over SSH: {exc}{fix}") from None

    return read
