"""``orch smoke``: boot one machine per configured provider through orch's boot path, then leave nothing.

Spends money: without ``--yes`` it prints what it would launch and the most it may cost, and exits 2. The use
case is orchestrator/app/smoke.py; cloud SDKs and the store are imported inside the command only.
"""

from __future__ import annotations

import math
import sys
import textwrap
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any

import typer

from orchestrator.cli.errors import EXIT_BAD_INPUT, EXIT_NO_MATCH, fail
from orchestrator.cli.jsonout import dumps
from orchestrator.cli.main import app
from orchestrator.words import plural

if TYPE_CHECKING:
    from orchestrator.app.smoke import SmokeResult
    from orchestrator.app.smoke_targets import SmokeTarget

_MACHINE_W = 26   # the MACHINE column: instance type and zone (or region)


@app.command()
def smoke(
    provider: Annotated[list[str] | None, typer.Option("--provider", "-p", help="Only this provider (repeatable; "
                                                       "default: every configured one).")] = None,
    yes: Annotated[bool, typer.Option("--yes", help="Launch (spends money). Without it: print the plan, exit 2.")]
    = False,
    store: Annotated[str | None, typer.Option("--store", help="Where the agents report (s3://, gs://, az://); "
                                              "default: daemon.state_store / ORCH_STATE_STORE.")] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds from launch to the agent's first report.")]
    = 900.0,
    teardown_timeout: Annotated[float, typer.Option("--teardown-timeout", help="Seconds to tear down and clean "
                                                    "up, per provider.")] = 600.0,
    poll: Annotated[float, typer.Option("--poll", help="Seconds between two reads of the cloud and the store.")]
    = 5.0,
    as_json: Annotated[bool, typer.Option("--json", help="The plan or the results as JSON.")] = False,
) -> None:
    """Per provider: boot a small machine, wait for its agent's first report, tear down, check nothing is left.

    The machine is a CPU one where the provider rents one, else its cheapest GPU offer, with orch's boot script;
    the report comes through the store. Exit 0 only if every provider passed."""
    from orchestrator.app.smoke_targets import SmokeOptions, plan_targets
    from orchestrator.config.errors import ConfigError
    from orchestrator.config.file import load_config
    from orchestrator.config.providers import build_providers
    from orchestrator.daemon.service_settings import load_service_settings

    for flag, value, most in (("--timeout", timeout, 86400.0), ("--teardown-timeout", teardown_timeout, 86400.0),
                              ("--poll", poll, 3600.0)):
        if not (math.isfinite(value) and 0 < value <= most):
            fail(f"{flag} must be more than 0 and at most {most:g} seconds", EXIT_BAD_INPUT, as_json=as_json)
    from providers.registry import UnknownProviderError, canonical_provider

    try:  # a misspelt --provider is told first, as every command tells it (not behind the store's requirement)
        provider = [canonical_provider(name) for name in provider] if provider else provider
    except UnknownProviderError as exc:
        fail(str(exc), EXIT_BAD_INPUT, as_json=as_json)
    try:
        config = load_config()
        settings = load_service_settings(config)
        if store is not None:
            settings = replace(settings, state_store=store)
        if not settings.state_store:
            fail("orch smoke needs a store the agent reports to: set daemon.state_store (ORCH_STATE_STORE) or "
                 "pass --store s3://bucket/prefix", EXIT_BAD_INPUT, as_json=as_json)
        enabled = set(config.enabled_providers())
        unknown = sorted(set(provider or ()) - enabled)
        if unknown:
            known = ", ".join(sorted(enabled)) or "none"
            fail(f"not a configured provider: {', '.join(unknown)} (configured: {known})", EXIT_BAD_INPUT,
                 as_json=as_json)
        providers = build_providers(config, set(provider) if provider else None)
    except ConfigError as exc:
        fail(str(exc), EXIT_BAD_INPUT, as_json=as_json)
    if not providers:
        fail("no provider is configured (see docs/configuration.md)", EXIT_BAD_INPUT, as_json=as_json)
    opts = SmokeOptions(owner=config.owner, ssh_public_key=settings.ssh_public_key, timeout_s=timeout,
                        teardown_timeout_s=teardown_timeout, poll_s=poll)
    try:
        targets = plan_targets(providers, opts)
        if not yes:
            _print_plan(targets, as_json)
            raise SystemExit(EXIT_BAD_INPUT)
        results = _run_all(targets, providers, settings, config, opts)
    finally:
        for built in providers.values():
            close = getattr(built, "close", None)
            if callable(close):
                close()
    _print_results(results, as_json)
    if not all(r.ok for r in results):
        raise SystemExit(EXIT_NO_MATCH)


def _run_all(targets: list[SmokeTarget], providers: dict[str, Any], settings: Any, config: Any,
             opts: Any) -> list[SmokeResult]:
    from orchestrator.app.smoke import SmokeSeams, run_smoke
    from orchestrator.daemon.assembly import boot_seams
    from orchestrator.redaction import safe_line

    def progress(line: str) -> None:
        sys.stderr.write(f"smoke: {safe_line(line)}\n")
        sys.stderr.flush()

    results = []
    for target in targets:
        monitor, bootstrapper, startup = boot_seams(settings, {target.provider: providers[target.provider]}, config)
        results.append(run_smoke(target, providers[target.provider], SmokeSeams(startup, monitor, bootstrapper), opts,
                                 progress=progress))
    return results


def _machine(offer: Any) -> str:
    return f"{offer.instance_type} {offer.zone or offer.region}" if offer is not None else "-"


def _row(provider: str, machine: str, rest: str) -> list[str]:
    """A row of the plan or the results. A machine longer than its column is never cut (the plan names what is
    paid for: ``e2-standard-2 us-central1-a`` cut to 26 columns lost the zone): it goes whole on the provider's
    line, and the row's other columns on the next, in their places."""
    if len(machine) <= _MACHINE_W:
        return [f"{provider:<9} {machine:<{_MACHINE_W}} {rest}"]
    return [f"{provider:<9} {machine}", f"{'':<9} {'':<{_MACHINE_W}} {rest}"]


def _print_plan(targets: list[SmokeTarget], as_json: bool) -> None:
    from orchestrator.app.smoke_targets import MachineKind
    from orchestrator.redaction import safe_line

    total = sum(t.max_cost_usd for t in targets)
    if as_json:
        sys.stdout.write(dumps({"launched": False, "max_cost_usd": round(total, 4), "targets": [
            {"provider": t.provider, "instance_type": t.offer.instance_type if t.offer else None,
             "region": t.offer.region if t.offer else None, "zone": t.offer.zone if t.offer else None,
             "market": t.offer.market.value if t.offer else None,
             "kind": t.kind.value if t.kind else None, "gpus": t.offer.gpu_count if t.offer else None,
             "price_hr": t.offer.price_hr if t.offer else None,
             "price_source": (t.offer.price_source or t.offer.source) if t.offer else None,
             "max_cost_usd": t.max_cost_usd, "note": t.note or None,
             "problem": safe_line(t.problem) or None} for t in targets]}, indent=2) + "\n")
    else:
        out, notes = [f"{'PROVIDER':<9} {'MACHINE':<26} {'KIND':<4} {'MARKET':<9} {'$/H':>8} {'MAX COST':>9}"], []
        for t in targets:
            if t.offer is None:   # why, whole (wrapped, not cut at 79) and redacted: a cloud's error text
                out += textwrap.wrap(safe_line(f"cannot: {t.problem}"), 79, initial_indent=f"{t.provider:<9} ",
                                     subsequent_indent=" " * 10, break_on_hyphens=False, break_long_words=False)
                continue
            kind = t.kind.value.upper() if t.kind else "-"
            out += _row(t.provider, _machine(t.offer), f"{kind:<4} {t.offer.market.value:<9} "
                        f"{t.offer.price_hr:>8.3f} {t.max_cost_usd:>9.2f}")
            if t.note:
                notes.append(f"{t.provider}: {t.note}")
            elif t.kind is MachineKind.CPU:
                notes.append(f"{t.provider}: $/h from {t.offer.price_source}, as of {t.offer.price_as_of}")
        out += [w for line in notes for w in textwrap.wrap(line, 78, initial_indent="  ", subsequent_indent="    ",
                                                           break_on_hyphens=False)]   # keeps a URL whole
        machines = plural(sum(1 for t in targets if t.offer), "machine")
        out += textwrap.wrap(f"would launch {machines}, at most ${total:.2f} in all; nothing launched: run again "
                             "with --yes", 79)
        sys.stdout.write("\n".join(out) + "\n")


def _print_results(results: list[SmokeResult], as_json: bool) -> None:
    from orchestrator.redaction import safe_line

    if as_json:
        sys.stdout.write(dumps({"ok": all(r.ok for r in results), "results": [
            {"provider": r.provider, "result": r.result, "instance_type": r.offer.instance_type if r.offer else None,
             "kind": r.kind.value if r.kind else None,
             "region": r.offer.region if r.offer else None, "price_hr": r.offer.price_hr if r.offer else None,
             "launch_id": r.launch_id or None, "instance_id": r.instance_id or None, "launched": r.launched,
             "first_report_s": None if r.first_report_s is None else round(r.first_report_s, 2),
             "held_s": round(r.held_s, 2), "cost_usd": r.cost_usd, "leftovers": list(r.leftovers),
             "error": safe_line(r.error) or None} for r in results]}, indent=2) + "\n")
        return
    out = [f"{'PROVIDER':<9} {'MACHINE':<26} {'REPORT':>7} {'HELD':>6} {'COST':>8} {'LEFT':>4}  RESULT"]
    notes = []
    for r in results:
        report = "-" if r.first_report_s is None else f"{r.first_report_s:.0f}s"
        cost = f"${r.cost_usd:.3f}"
        out += _row(r.provider, _machine(r.offer), f"{report:>7} {r.held_s:>5.0f}s {cost:>8} "
                    f"{len(r.leftovers):>4}  {r.result}")
        lines = ([f"{r.provider}: {safe_line(r.error)}"] if r.error else []) + [f"{r.provider}: left: {x}"
                                                                                for x in r.leftovers]
        notes += [w for line in lines for w in textwrap.wrap(line, 78, initial_indent="  ", subsequent_indent="    ")]
    sys.stdout.write("\n".join(out + notes) + "\n")
