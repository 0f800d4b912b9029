"""No credential ever comes back out: distinctive fake secrets are planted in every manifest field, in env,
in the config file, in flags and in the launch environment (``secrets:``); every command's output, the
daemon's log lines and the SQLite store's bytes are then searched for them.

The planted values are made up for this test; they only have the published shapes of real credentials.
"""

from __future__ import annotations

import copy
import io
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from orchestrator.cli.main import app
from orchestrator.daemon.observability import JsonFormatter
from tests._jobs_clouds import FakeClouds, start_clouds

PLANTED = [
    "AKIAQLEAKPROBE7ZZ4XY",                                     # AWS access key id
    "wZ3q/Lk9Rb2xYc7Vn4Hd1Gf6Js0PaE5uIoK3mT8+",                 # AWS secret access key
    "ghp_LeakProbe0123456789abcdefABCDEFghijkl",                # GitHub token
    "hf_LeakProbeQwErTyUiOpAsDfGhJkLzXcVbNm01",                 # Hugging Face token
    "xoxb-4242424242-2424242424-LeakProbeSlack",                # Slack token
    "-----BEGIN RSA PRIVATE KEY-----",                          # a private key
    "eyJhbGciOiJIUzI1NiJ9.eyJsZWFrIjoicHJvYmUifQ.c2ln",        # a JSON web token
    "sk-proj-LeakProbe9A8b7C6d5E4f3G2h1I0j",                    # an API key
]
URL_PASSWORD = "LeakProbePw4242"
LAUNCH_SECRETS = {"PROBE_HF": "hf_LaunchEnvProbeZxCvBnMaSdFgHjKlQwErTy9",
                  "PROBE_GH": "ghp_LaunchEnvProbe0123456789abcdefABCDEF"}
#: The s3:// store's keys a node off AWS is handed (without them nothing is launched): they must not leak either.
STORE_KEYS = {"AWS_ACCESS_KEY_ID": "AKIALEAKPROBE0000001",
              "AWS_SECRET_ACCESS_KEY": "StoreKeyLeakProbe0123456789abcdefABCDEFgh"}

VALID: dict[str, Any] = {
    "apiVersion": "orch/v1", "kind": "Job", "name": "leak",
    "resources": {"gpu": "L4", "count": 1},
    "market": "spot",
    "run": {"launcher": "command", "command": "nvidia-smi"},
    "checkpoint": {"path": "/ckpt", "store": "s3://leak-bucket/ckpt", "every": "10m"},
    "policies": {"estimated_hours": 2, "budget_usd": 20},
    "env": {"MODE": "probe"},
}


def _set(*path: str | int) -> Callable[[dict[str, Any], str], None]:
    def put(doc: dict[str, Any], value: str) -> None:
        node: Any = doc
        for part in path[:-1]:
            node = node.setdefault(part, {}) if isinstance(part, str) else node[part]
        node[path[-1]] = value
    return put


def _key(*path: str) -> Callable[[dict[str, Any], str], None]:
    def put(doc: dict[str, Any], value: str) -> None:
        node: Any = doc
        for part in path:
            node = node.setdefault(part, {})
        node[value] = "1"
    return put


# Every field of a manifest, each given a planted secret (as the value, inside a list, or as a key).
FIELDS: dict[str, Callable[[dict[str, Any], str], None]] = {
    "apiVersion": _set("apiVersion"), "kind": _set("kind"), "name": _set("name"),
    "resources.gpu": _set("resources", "gpu"), "resources.count": _set("resources", "count"),
    "resources.nodes": _set("resources", "nodes"), "resources.min_vram_gb": _set("resources", "min_vram_gb"),
    "resources.interconnect": _set("resources", "interconnect"), "resources.disk_gb": _set("resources", "disk_gb"),
    "market": _set("market"), "max_price_hr": _set("max_price_hr"),
    "providers.allow": lambda d, v: d.update(providers={"allow": [v]}),
    "regions.deny": lambda d, v: d.update(regions={"deny": [v]}),
    "image": _set("image"), "setup": lambda d, v: d.update(setup=["pip install -e .", v]),
    "run.launcher": _set("run", "launcher"), "run.command": _set("run", "command"),
    "run.args": lambda d, v: d["run"].update(args=["--token", v]), "run.backend": _set("run", "backend"),
    "data.source": lambda d, v: d.update(data=[{"source": v, "path": "/data"}]),
    "data.path": lambda d, v: d.update(data=[{"source": "s3://b/d", "path": v}]),
    "data.region": lambda d, v: d.update(data=[{"source": "s3://b/d", "path": "/d", "region": v}]),
    "checkpoint.path": _set("checkpoint", "path"), "checkpoint.store": _set("checkpoint", "store"),
    "checkpoint.every": _set("checkpoint", "every"),
    "checkpoint.resume": lambda d, v: d["checkpoint"].update(resume={"arg": v}),
    "checkpoint.notify": lambda d, v: d["checkpoint"].update(notify={"signal": v}),
    "policies.budget_usd": _set("policies", "budget_usd"), "policies.deadline": _set("policies", "deadline"),
    "policies.idle.window": _set("policies", "idle", "window"),
    "policies.idle.action": _set("policies", "idle", "action"),
    "policies.max_relaunches": _set("policies", "max_relaunches"),
    "policies.preempted_zone_cooldown": _set("policies", "preempted_zone_cooldown"),
    "policies.estimated_hours": _set("policies", "estimated_hours"),
    "env value": _set("env", "HUB"), "env key": _key("env"), "secrets": lambda d, v: d.update(secrets=[v]),
    "unknown top-level key": _key(), "unknown nested key": _key("resources"),
}


@pytest.fixture(scope="module")
def clouds() -> Iterator[FakeClouds]:
    c = start_clouds()
    try:
        yield c
    finally:
        c.close()


class Outputs:
    """Everything orch printed or logged during the test, by what produced it."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.log = io.StringIO()

    def run(self, *args: str) -> tuple[int, str]:
        result = CliRunner().invoke(app, list(args))
        text = result.stdout + result.stderr
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            text += repr(result.exception)
        self.seen.append((f"orch {' '.join(args)[:100]}", text))
        return result.exit_code, text

    def assert_clean(self, secrets: list[str], *extra: tuple[str, str]) -> None:
        sources = [*self.seen, ("daemon log", self.log.getvalue()), *extra]
        leaks = [(what, s) for what, text in sources for s in secrets if s in text]
        assert not leaks, f"secrets leaked: {leaks[:5]}"


@pytest.fixture
def outputs() -> Iterator[Outputs]:
    out = Outputs()
    handler = logging.StreamHandler(out.log)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("orch")
    root.addHandler(handler)
    old = root.level
    root.setLevel(logging.DEBUG)
    try:
        yield out
    finally:
        root.removeHandler(handler)
        root.setLevel(old)


def _store_bytes(data_home: Path) -> str:
    files = sorted((data_home / "orch").glob("orch.db*"))
    assert any(f.name == "orch.db" for f in files)
    return "".join(f.read_bytes().decode("latin-1") for f in files)


def test_secrets_planted_in_every_field_are_refused_and_never_printed_or_stored(
        tmp_path: Path, outputs: Outputs) -> None:
    outputs.run("status")   # the store exists: nothing refused may reach it
    for n, (field, plant) in enumerate(FIELDS.items()):
        secret = PLANTED[n % len(PLANTED)]
        doc = copy.deepcopy(VALID)
        plant(doc, secret)
        path = tmp_path / f"field-{n}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        for command in (["validate"], ["validate", "--json"], ["plan", "--json"], ["render"], ["apply", "--no-launch"],
                        ["apply", "--no-launch", "--json"]):
            code, text = outputs.run(*command, str(path))
            assert code == 2, f"{field}: {command} accepted a manifest holding {secret[:6]}...:\n{text}"
    url = tmp_path / "url.yaml"
    url.write_text(yaml.safe_dump({**VALID, "image": f"https://ci:{URL_PASSWORD}@registry.local/img"}))
    outputs.run("validate", str(url))
    outputs.assert_clean([*PLANTED, URL_PASSWORD], ("store", _store_bytes(tmp_path / "xdg-data")))


def test_secrets_in_flags_and_the_config_file_are_never_printed(tmp_path: Path, outputs: Outputs,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"owner": PLANTED[0], "providers": {PLANTED[2]: {}}}))
    monkeypatch.setenv("ORCH_CONFIG", str(config))
    for args in (["providers"], ["tick"], ["plan", "--configured", "x.yaml"], ["quote", "--gpu", PLANTED[3]],
                 ["quote", "--provider", PLANTED[4]], ["quote", "--region", PLANTED[1]],
                 ["quote", "--count", PLANTED[6]], ["status", PLANTED[7]], ["events", PLANTED[5]],
                 ["db", "current", "--url", f"postgresql://orch:{URL_PASSWORD}@127.0.0.1:1/orch"],
                 ["simulate", "--traces", "t.json", "--work", PLANTED[2]], ["down", PLANTED[0], "--yes"]):
        outputs.run(*args)
    outputs.assert_clean([*PLANTED, URL_PASSWORD])


def test_launch_secrets_and_cloud_keys_never_reach_outputs_logs_or_the_store(
        tmp_path: Path, outputs: Outputs, clouds: FakeClouds, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from tests.fakes.scoped_store import ScopedStore

    clouds.reset()
    config = clouds.write_config(tmp_path / "config.yaml")
    sts = ScopedStore(time.time).start()    # the token service the node's scoped credential is cut from
    sts.add_s3_root(STORE_KEYS["AWS_ACCESS_KEY_ID"], STORE_KEYS["AWS_SECRET_ACCESS_KEY"])
    for key, value in {"ORCH_CONFIG": str(config), **clouds.env(), **LAUNCH_SECRETS, **STORE_KEYS,
                       "ORCH_STS_ENDPOINT": sts.url}.items():
        monkeypatch.setenv(key, value)
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({**VALID, "secrets": sorted(LAUNCH_SECRETS)}, sort_keys=False))
    assert outputs.run("validate", str(job))[0] == 0
    outputs.run("plan", str(job), "--json")
    outputs.run("render", str(job))
    code, text = outputs.run("apply", str(job), "--launch", "--yes")
    assert code == 0 and "launched" in text, text
    for args in (["tick", "--json"], ["status"], ["status", "--json"], ["events"], ["events", "--json"],
                 ["down", "--all", "--yes", "--poll", "0.05", "--timeout", "30"]):
        outputs.run(*args)
    sts.stop()
    cloud_keys = [v for k, v in clouds.env().items() if k.endswith("_API_KEY")]
    outputs.assert_clean([*LAUNCH_SECRETS.values(), *STORE_KEYS.values(), *cloud_keys],
                         ("store", _store_bytes(tmp_path / "xdg-data")), *_what_the_clouds_were_told(clouds))


def _what_the_clouds_were_told(clouds: FakeClouds) -> list[tuple[str, str]]:
    """Every request body the fake clouds received, and each boot script in them with its payload unpacked
    (its files and the environment it hands the agent): a secret or store key must be in none of them."""
    import json

    from orchestrator.runtime.boot import boot_env, boot_files
    from tests.test_node_payload_clouds import _decoded, _strings

    told = {"vastai": clouds.vast.requests, "lambda": clouds.lambda_fake.requests, "runpod": clouds.runpod.requests,
            "gcp": clouds.gce.fake.requests, "azure": clouds.arm.requests}
    out: list[tuple[str, str]] = []
    scripts = 0
    for cloud, reqs in told.items():
        bodies = [getattr(r, "body", None) for r in reqs]
        out.append((f"{cloud} requests", json.dumps(bodies, default=str)))
        for script in {s for s in map(_decoded, _strings(bodies)) if s}:
            scripts += 1
            files = " ".join(v.decode("utf-8", "replace") for v in boot_files(script).values())
            out.append((f"{cloud} boot payload", f"{script} {json.dumps(boot_env(script))} {files}"))
    assert scripts, "no boot script reached any cloud"
    return out
