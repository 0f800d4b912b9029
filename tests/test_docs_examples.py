"""The YAML a reader copies out of the docs is accepted as it stands: every ```yaml block of
docs/configuration.md and docs/providers/*.md loads as orch's config (each provider's section through its
settings model, the catalog and daemon sections through theirs), and every ```yaml block of docs/manifests.md
validates as a manifest, except the fragments named below. A new block is checked by default."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

ROOT = Path(__file__).resolve().parents[1]
YAML_BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.S | re.M)
#: docs/manifests.md's blocks that are parts of a manifest, by their first line (each says so in its text).
MANIFEST_FRAGMENTS = {
    "model: {name: llama-3-8b, method: qlora, precision: bf16, seq_len: 4096}",   # instead of resources.gpu
    "code:",                                                                        # the code: section alone
    "# yaml-language-server: $schema=https://raw.githubusercontent.com/<org>/orch/main/docs/orch-manifest.schema.json",
}


def _blocks(*docs: Path) -> list[tuple[str, str]]:
    """(``doc:line``, text) of every ```yaml block in ``docs``."""
    return [(f"{doc.relative_to(ROOT)}:{doc.read_text()[:m.start()].count(chr(10)) + 1}", m.group(1))
            for doc in docs for m in YAML_BLOCK.finditer(doc.read_text())]


CONFIG_BLOCKS = _blocks(ROOT / "docs" / "configuration.md", *sorted((ROOT / "docs" / "providers").glob("*.md")))
MANIFEST_BLOCKS = [(at, text) for at, text in _blocks(ROOT / "docs" / "manifests.md")
                   if text.splitlines()[0] not in MANIFEST_FRAGMENTS]


def test_the_docs_have_the_blocks_this_file_checks() -> None:
    """Not vacuous: the config pages have their examples, and manifests.md its full one and its fragments."""
    assert len(CONFIG_BLOCKS) >= 10
    assert len(MANIFEST_BLOCKS) >= 1
    firsts = {text.splitlines()[0] for _, text in _blocks(ROOT / "docs" / "manifests.md")}
    assert firsts >= MANIFEST_FRAGMENTS, "a fragment named here is no longer in docs/manifests.md"


@pytest.mark.parametrize(("at", "text"), CONFIG_BLOCKS, ids=[at for at, _ in CONFIG_BLOCKS])
def test_a_config_example_loads(at: str, text: str, tmp_path: Path) -> None:
    from orchestrator.config.catalog import read_catalog_section
    from orchestrator.config.daemon import read_daemon_section
    from orchestrator.config.file import load_config
    from orchestrator.config.providers import settings_error
    from providers.registry import settings_class

    path = tmp_path / "config.yaml"
    path.write_text(text)
    config = load_config(path)                       # top-level keys, owner, budgets, alerts
    read_catalog_section(config)
    read_daemon_section(config.sections.get("daemon") or {}, config.source())
    for name in config.enabled_providers():
        try:
            settings_class(name).model_validate(config.provider_section(name))
        except ValidationError as exc:
            raise AssertionError(f"{at}: {settings_error(config, name, exc)}") from None


@pytest.mark.parametrize(("at", "text"), MANIFEST_BLOCKS, ids=[at for at, _ in MANIFEST_BLOCKS])
def test_a_manifest_example_validates(at: str, text: str, tmp_path: Path) -> None:
    from orchestrator.manifest import load_manifests

    path = tmp_path / "job.yaml"
    path.write_text(text)
    assert [m.manifest.name for m in load_manifests([path])], at

