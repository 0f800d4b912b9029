"""A bad value in any section of the config file is reported at its line: ``<file>:<line>: <section>.<key>: …``,
whether the section is read with the file (owner, providers, budgets, alerts) or later (catalog, daemon, a
provider's settings)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config.catalog import read_catalog_section
from orchestrator.config.errors import ConfigError
from orchestrator.config.file import load_config
from orchestrator.config.providers import build_providers
from orchestrator.daemon.assembly import load_service_settings

#: Line 1 is ``owner: tester``; every case's bad value sits on a line of its own below a few good ones.
CASES = [
    (
        "budgets",
        "budgets:\n  - name: all\n    monthly_usd: 100\n  - name: team-a\n    alert_at: [0.5]\n    monthly_usd: lots\n",
        7,
        "budgets.team-a.monthly_usd: must be a number, got 'lots'",
    ),
    (
        "budgets",
        "budgets:\n  - name: all\n    monthly_usd: 100\n    match:\n      owner: [alice,\n              Bob]\n",
        7,
        "budgets.all.match.owner[1]: 'Bob' is not an orch owner",
    ),
    (
        "budgets",
        "budgets:\n  - name: all\n    monthly_usd: 100\n    match:\n      owner: [alice,\n              team-]\n",
        7,
        "budgets.all.match.owner[1]: 'team-' is not an orch owner",
    ),
    (
        "budgets",
        "budgets:\n  - {name: a, monthly_usd: 1}\n  - {name: a, monthly_usd: 2}\n",
        4,
        "budgets.a: two budgets have this name",
    ),
    (
        "alerts",
        "alerts:\n  queue_size: 10\n  webhooks:\n    - name: ops\n      url: https://example.com/h\n"
        "      format: teams\n",
        7,
        "alerts.webhooks.ops.format: 'teams': choose slack or json",
    ),
    ("alerts", "alerts:\n  timeout_s: 5\n  sinks: []\n", 4, "alerts.sinks: unknown key (known: "),
    ("catalog", "catalog:\n  timeout_s: 30\n  refresh_every: soon\n", 4, "catalog.refresh_every: not a duration"),
    (
        "daemon",
        "daemon:\n  lease_ttl_s: 60\n  boot_timeout_s: 10 parsecs\n",
        4,
        "daemon.boot_timeout_s (ORCH_BOOT_TIMEOUT_S): not a number of seconds or a duration",
    ),
    # One wording for an unknown key in every section (config/errors.py unknown_key): the key meant, where one
    # is close, else the known ones.
    ("daemon", "daemon:\n  lease_ttl_s: 60\n\n  boot_timout_s: 90\n", 5,
     "daemon.boot_timout_s: unknown key (did you mean 'boot_timeout_s'?)"),
    ("catalog", "catalog:\n  refresh_evry: 6h\n", 3,
     "catalog.refresh_evry: unknown key (did you mean 'refresh_every'?)"),
    (
        "providers",
        "providers:\n  aws:\n    regions: [us-east-1]\n    endpoint_url: http://127.0.0.1:9\n    regoins: [x]\n",
        6,
        "providers.aws.regoins: ",
    ),
    ("providers", "providers:\n  aws: {}\n  azur: {}\n", 4, "providers.azur: "),
    ("providers", "providers:\n  lambdalabs:\n    api_key: k\n    regoins: [x]\n", 5, "providers.lambda.regoins: "),
    # Not pydantic's "Extra inputs are not permitted": the key meant, or the known ones.
    ("providers", "providers:\n  aws:\n    region: [us-east-1]\n", 4,
     "providers.aws.region: unknown key (did you mean 'regions'?)"),
    ("providers", "providers:\n  ssh:\n    hosts:\n      - {name: b, address: x, gpu: A100, gpu_count: 1,\n"
     "         prise_hr: 1}\n", 6, "providers.ssh.hosts[0].prise_hr: unknown key (did you mean 'price_hr'?)"),
    ("providers", "providers:\n  runpod:\n    colour: blue\n", 4, "providers.runpod.colour: unknown key (known: "),
    # A list of names configures nothing: it was an AttributeError, "a bug in orch".
    ("providers", "providers: [aws, runpod]\n", 2, "providers: must be a mapping of provider names"),
    ("owner", "", 1, "owner: "),
    # A misspelt section was read as none at all: no budget held, and nothing said.
    ("top", "providers: {}\nbudget:\n  - {name: a, monthly_usd: 1}\n", 3,
     "budget: unknown key (did you mean 'budgets'?)"),
    ("top", "providers: {}\ncolour: blue\n", 3, "colour: unknown key (known: alerts, budgets, catalog, daemon, "
     "owner, providers)"),
]


def _read(section: str, path: Path) -> object:
    """Read ``path`` as far as ``section`` is read: with the file, or by its own reader afterwards."""
    config = load_config(path)
    if section == "catalog":
        return read_catalog_section(config)
    if section == "daemon":
        return load_service_settings(config)
    if section == "providers":
        return build_providers(config)
    return config


@pytest.mark.parametrize(("section", "text", "line", "message"), CASES)
def test_a_bad_value_is_reported_at_its_line(
    section: str, text: str, line: int, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("ORCH_BOOT_TIMEOUT_S", "ORCH_LEASE_TTL_S", "ORCH_OWNER"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "config.yaml"
    path.write_text(("owner: Not An Owner\n" if section == "owner" else "owner: tester\n") + text)
    with pytest.raises(ConfigError) as caught:
        _read(section, path)
    assert str(caught.value).startswith(f"{path}:{line}: {message}"), str(caught.value)


def test_a_daemon_value_from_its_variable_names_no_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("owner: tester\ndaemon:\n  boot_timeout_s: 90\n")
    monkeypatch.setenv("ORCH_BOOT_TIMEOUT_S", "10 parsecs")  # the variable wins, so it is the bad value
    with pytest.raises(ConfigError) as caught:
        load_service_settings(load_config(path))
    assert str(caught.value).startswith("daemon.boot_timeout_s (ORCH_BOOT_TIMEOUT_S): "), str(caught.value)


def test_a_webhook_whose_variable_is_unset_names_the_line_it_is_written_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ORCH_TEST_HOOK", raising=False)
    path = tmp_path / "config.yaml"
    path.write_text(
        "owner: tester\nalerts:\n  webhooks:\n    - url: https://example.com/a\n    - url_env: ORCH_TEST_HOOK\n"
    )
    hook = load_config(path).alerts.webhooks[1]  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match=rf"^{path}:5: alerts\.webhooks\[1\]: url_env: \$ORCH_TEST_HOOK is not set"):
        hook.source.resolve(hook.where)


def test_a_bad_owner_from_orch_owner_names_the_variable_not_a_line_of_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file has no owner: line; the value came from ORCH_OWNER, which the message did not name."""
    path = tmp_path / "config.yaml"
    path.write_text("providers: {}\n")
    monkeypatch.setenv("ORCH_OWNER", "Bad Owner")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).startswith("ORCH_OWNER: owner 'Bad Owner' must be"), str(caught.value)
    assert str(path) in str(caught.value)      # where an owner: line would go instead
    path.write_text("owner: Bad\n")             # the file's own value: its line, as before
    with pytest.raises(ConfigError, match=rf"^{path}:1: owner: owner 'Bad'"):
        load_config(path)


def test_an_owner_ending_in_a_dash_is_refused_at_its_line(tmp_path: Path) -> None:
    """GCE refuses the network tag orch-<owner> that ends in '-' (tests/fakes/gce_contract.py: Tags.items, RFC
    1035) on every VM and firewall rule: such an owner is a config error, not a refusal at every GCP launch."""
    path = tmp_path / "config.yaml"
    path.write_text("owner: team-\n")
    with pytest.raises(ConfigError, match=rf"^{path}:1: owner: owner 'team-' must be .* end with a letter or digit"):
        load_config(path)
    path.write_text("owner: team-a\n")
    assert load_config(path).owner == "team-a"


def test_the_default_owner_cut_to_31_characters_does_not_end_in_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    import getpass

    from orchestrator.config.file import _default_owner
    from providers.base import validate_owner

    monkeypatch.setattr(getpass, "getuser", lambda: "a" * 30 + ".bc")   # 'aaa...a-bc' cut at 31: 'aaa...a-'
    owner = _default_owner()
    assert owner == "a" * 30 and validate_owner(owner) == owner
