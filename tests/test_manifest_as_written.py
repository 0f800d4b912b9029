"""A ``launcher: command`` job resumed by argument must run one command: orch appends the resume argument as the
shell's "$@", which a list or pipeline passes to its last command only (the job would start over after every
preemption) and a comment swallows (orchestrator/manifest/as_written.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.manifest import Manifest, ManifestError, load_manifests, parse_text
from orchestrator.manifest.as_written import splitting_token

HEAD = """\
apiVersion: orch/v1
kind: Job
name: cmd
resources:
  gpu: a100
run:
  launcher: command
  command: {command}
"""
CHECKPOINT = """\
checkpoint:
  path: /ckpt
  store: s3://bucket/ckpt
"""


@pytest.mark.parametrize(("command", "token"), [
    ("python train.py && python eval.py", "&&"),
    ("python train.py || true", "||"),
    ("cd src; python train.py", ";"),
    ("python train.py 2>&1 | tee log", "|"),
    ("python train.py &", "&"),
    ("(cd src && python train.py)", "("),
    ("python train.py # the run", "#"),
])
def test_a_list_pipeline_or_comment_is_refused_at_its_line(command: str, token: str, tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(HEAD.format(command=json.dumps(command)) + CHECKPOINT)
    with pytest.raises(ManifestError) as info:
        load_manifests([path])
    [err] = info.value.errors
    assert (err.field, err.line) == ("run.command", 8)
    assert f"({token!r})" in str(err) or token == "#"
    assert "--resume-from" in str(err) and err.hint and "resume" in err.hint


@pytest.mark.parametrize("command", [
    "python train.py --epochs 3",
    "python train.py 2>&1",              # a redirection, not a list
    "python train.py > train.log",
    "echo 'a && b; c | d # e'",          # operators inside quotes are text
    "bash run.sh",
])
def test_one_command_is_accepted(command: str) -> None:
    assert splitting_token(command) is None
    [(m, _)] = parse_text(HEAD.format(command=json.dumps(command)) + CHECKPOINT)
    assert m.run.command == command


def test_a_list_is_accepted_without_a_checkpoint_or_with_resume_by_env() -> None:
    command = json.dumps("python train.py && python eval.py")
    [(plain, _)] = parse_text(HEAD.format(command=command))
    assert plain.checkpoint is None
    [(by_env, _)] = parse_text(HEAD.format(command=command) + CHECKPOINT + "  resume: {env: RESUME_FROM}\n")
    assert by_env.checkpoint is not None and by_env.checkpoint.resume.env == "RESUME_FROM"


def test_a_job_stored_before_the_rule_still_loads_from_the_store() -> None:
    """The rule is the loader's, not the schema's: a job applied before it keeps loading (the store validates
    its manifests with the schema alone, store/specs.py)."""
    doc = {"apiVersion": "orch/v1", "kind": "Job", "name": "old", "resources": {"gpu": "A100-80G"},
           "run": {"launcher": "command", "command": "python train.py && python eval.py"},
           "checkpoint": {"path": "/ckpt", "store": "s3://bucket/ckpt"}}
    manifest = Manifest.model_validate(doc)
    assert manifest.run.command == "python train.py && python eval.py"


def test_env_and_secret_names_of_orchs_own_are_refused_at_their_lines(tmp_path: Path) -> None:
    """orch sets ORCH_NODE_RANK, ORCH_RESUME_PATH... on the node; a job's env (exported after them) would override
    them: node 1 told it is rank 5, a resume path pointing elsewhere."""
    path = tmp_path / "job.yaml"
    path.write_text(HEAD.format(command="python train.py") + "env:\n  LR: '0.1'\n  ORCH_NODE_RANK: '5'\n"
                    "secrets:\n  - HF_TOKEN\n  - ORCH_RESUME_PATH\n")
    with pytest.raises(ManifestError) as info:
        load_manifests([path])
    found = [(e.field, e.line, str(e).split(": ")[2].split(":")[0]) for e in info.value.errors]
    assert found == [("env", 11, "ORCH_NODE_RANK"), ("secrets[1]", 14, "ORCH_RESUME_PATH")]
    assert all(e.hint for e in info.value.errors)


def test_other_names_and_a_resume_env_of_orchs_are_accepted() -> None:
    """Only the job's own env and secrets are checked: ``checkpoint.resume.env`` may name ORCH_RESUME_PATH,
    the variable orch itself sets."""
    [(m, _)] = parse_text(HEAD.format(command="python train.py") + CHECKPOINT + "  resume: {env: ORCH_RESUME_PATH}\n"
                          "env:\n  MY_ORCH_FLAG: '1'\nsecrets: [HF_TOKEN]\n")
    assert m.env == {"MY_ORCH_FLAG": "1"} and m.secrets == ["HF_TOKEN"]
