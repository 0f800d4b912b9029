"""The paths the docs name are the repository's: none that exists only on a developer's machine (issue 31:
`/work/venv/bin/python` in four places; commands a reader copies run from a fresh clone, and `.venv/` is what
scripts/test.sh makes), and every file and module of the repository they name exists (modules get split and
moved: the docs must follow)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Absolute paths of someone's machine: a workspace, a home directory, a temporary directory of one run.
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:work|home/\w+|Users/\w+|root|tmp/(?:tmp[.\w]\w+|pytest-of-\w+))/[\w./-]*")


def test_docs_name_no_machine_specific_path() -> None:
    found = [f"{p.relative_to(ROOT)}:{n}: {m.group(0)}"
             for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
             for n, line in enumerate(p.read_text().splitlines(), 1) for m in MACHINE_PATH.finditer(line)]
    assert found == []


# --- Every repository path and module the docs name exists (modules were split and moved; docs must follow).

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
#: A path from the top of the repository (`providers/aws/offers.py`, `tests/test_crash_safety*.py`, `docs/deploy/`),
#: or a link relative to the doc (`providers/ssh.md` in docs/).
ROOTED = re.compile(r"(?<![\w/.~$:<>-])((?:orchestrator|providers|tests|scripts|docs|examples)/[\w./*-]*[\w*])")
#: A Python file named alone or by its last folders (`errors.py` beside `providers/aws/`, `store/specs.py`).
PY_FILE = re.compile(r"(?<![\w/.~$:<>-])((?:[\w-]+/)*[\w-]+\.py)(?![\w.]*\w)")
#: A dotted module path, maybe ending in a name it defines (`orchestrator.redaction`, `providers.base.GONE_...`).
DOTTED = re.compile(r"(?<![\w./-])((?:orchestrator|providers)(?:\.[A-Za-z_]\w*)+)")
#: Python files the docs name that are not orch's, on purpose: someone else's code, the user's own script,
#: the modules docs/engine.md's "before" column names.
NOT_OURS = {
    "deepspeed/runtime/zero/stage_1_and_2.py": "DeepSpeed's", "stage3.py": "DeepSpeed's",
    "sky_spot/strategies/rc_cr_threshold.py": "SkyPilot's", "vastai/cli/util.py": "vast-cli's",
    "train.py": "a user's script", "train/train.py": "a user's script", "my_policy.py": "a user's policy",
    "service.py": "engine.md: before", "wiring.py": "engine.md: before", "jobs_service.py": "engine.md: before",
}
#: Dotted names that are manifest fields, not modules (`providers.allow` in docs/manifests.md).
MANIFEST_KEYS = {"providers.allow", "providers.deny"}


def _python_files() -> list[str]:
    """The repository's Python files (not under a hidden folder such as .venv or .git)."""
    import os

    found = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
        found += [(Path(folder) / f).relative_to(ROOT).as_posix() for f in files if f.endswith(".py")]
    return found


def _module(parts: list[str]) -> Path | None:
    base = ROOT.joinpath(*parts)
    return next((f for f in (base.with_suffix(".py"), base / "__init__.py") if f.is_file()), None)


def _defines(module: Path, name: str) -> bool:
    """``name`` is a top-level def, class, assignment or import of ``module``, or a submodule of its package."""
    import ast

    if module.name == "__init__.py" and _module([*module.parent.relative_to(ROOT).parts, name]):
        return True
    names: set[str] = set()
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return name in names


def _dotted_problem(token: str) -> str | None:
    """Why ``token`` names nothing: no such module, or a name its module does not define; a provider's
    config key (`providers.ssh.hosts`) must be a field of that provider's settings."""
    from providers.registry import PROVIDER_NAMES, entry, settings_class

    parts = token.split(".")
    if token in MANIFEST_KEYS:
        return None
    if parts[0] == "providers" and len(parts) == 3 and parts[1] in PROVIDER_NAMES:
        package = entry(parts[1]).package.split(".")
        if _module([*package, parts[2]]):
            return None
        fields = settings_class(parts[1]).model_fields
        return None if parts[2] in fields else f"no setting {parts[2]} of provider {parts[1]}"
    for i in range(len(parts), 1, -1):
        module = _module(parts[:i])
        if module is not None:
            rest = parts[i:]
            if rest and not _defines(module, rest[0]):
                return f"{module.relative_to(ROOT)} defines no {rest[0]}"
            return None
    return "no such module"


def _named_in(docs: list[Path]) -> list[tuple[str, str]]:
    """(``doc:line``, problem) for every repository path or module a doc names that does not exist."""
    python_files = _python_files()
    found = []
    for doc in docs:
        for n, line in enumerate(doc.read_text().splitlines(), 1):
            at = f"{doc.relative_to(ROOT) if doc.is_relative_to(ROOT) else doc.name}:{n}"
            for m in ROOTED.finditer(line):
                path = m.group(1).rstrip(".")
                if not any(list(base.glob(path)) if "*" in path else (base / path).exists()
                           for base in (ROOT, doc.parent)):
                    found.append((at, path))
            for m in PY_FILE.finditer(line):
                name = m.group(1)
                if ROOTED.fullmatch(name) or name in NOT_OURS:
                    continue
                if not any(f == name or f.endswith("/" + name) for f in python_files):
                    found.append((at, name))
            for m in DOTTED.finditer(line):
                if (problem := _dotted_problem(m.group(1))) is not None:
                    found.append((at, f"{m.group(1)}: {problem}"))
    return found


def test_every_repository_path_and_module_the_docs_name_exists() -> None:
    found = _named_in(DOCS)
    assert found == [], "the docs name what is not in the repository:\n" + "\n".join(f"{a}: {p}" for a, p in found)



def test_a_provider_page_names_modules_of_that_provider() -> None:
    """docs/providers/<name>.md names the provider's modules alone (`errors.py`, `offers.py`): each is in that
    provider's package, not merely somewhere (there are several `offers.py`)."""
    from providers.registry import PROVIDER_NAMES, entry

    found = []
    for doc in sorted((ROOT / "docs" / "providers").glob("*.md")):
        assert doc.stem in PROVIDER_NAMES, f"{doc.name}: no provider {doc.stem}"
        package = ROOT.joinpath(*entry(doc.stem).package.split("."))
        for n, line in enumerate(doc.read_text().splitlines(), 1):
            found += [f"{doc.name}:{n}: {m.group(1)} is not in {package.relative_to(ROOT)}/"
                      for m in PY_FILE.finditer(line)
                      if "/" not in m.group(1) and m.group(1) not in NOT_OURS and not (package / m.group(1)).is_file()]
    assert found == []

def test_the_check_finds_paths_modules_and_settings_that_do_not_exist(tmp_path: Path) -> None:
    """It bites: a module moved away (orchestrator/cli/words.py went to orchestrator/words.py), a file named
    alone that no folder holds, a module or name that is not there, a provider setting that does not exist."""
    doc = tmp_path / "bad.md"
    doc.write_text("`orchestrator/cli/words.py`, `quote_no_such.py`, `orchestrator.cli.words`, `orchestrator.nosuch`;\n"
                   "`providers.base.NO_SUCH_NAME`, `providers.ssh.no_such_key`. Fine: `providers/aws/offers.py`,\n"
                   "`orchestrator/words.py`, `errors.py`, `store/specs.py`, `tests/test_crash_safety*.py`,\n"
                   "`orchestrator.words.plural`, `providers.ssh.hosts`, `providers.aws.settings`.\n")
    assert [problem for _, problem in _named_in([doc])] == [
        "orchestrator/cli/words.py", "quote_no_such.py",
        "orchestrator.cli.words: orchestrator/cli/__init__.py defines no words", "orchestrator.nosuch: no such module",
        "providers.base.NO_SUCH_NAME: providers/base.py defines no NO_SUCH_NAME",
        "providers.ssh.no_such_key: no setting no_such_key of provider ssh"]
