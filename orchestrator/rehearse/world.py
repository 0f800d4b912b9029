"""The user's manifest, moved onto this machine for a rehearsal: what changes, and why, is recorded.

* one node: the manifest's nodes x GPUs become one machine with ``procs`` processes (GPUs here, or CPU);
* the checkpoint store (s3://, gs://, az://) becomes a local directory, ``file://<rehearsal>/store``;
* the checkpoint directory moves under each life's own directory (a relaunched machine has an empty disk),
  and so do arguments, environment values and the notify file that name it;
* no image (the job runs with this machine's Python), no setup lines, no data staging;
* secrets: the value from this environment when set, else a placeholder;
* words naming files next to the manifest (the script, a config, ``python train.py`` in a command) become
  absolute paths, since the job runs in the life's work directory;
* ``ORCH_STEPS_LOG`` (a file the job may append ``step N`` lines to) and ``ORCH_REHEARSAL=1`` are set.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from orchestrator.manifest.schema import Manifest
from orchestrator.runtime.from_manifest import LaunchFacts, render_input_for
from orchestrator.runtime.render_input import CloudKind, RenderInput
from orchestrator.words import plural
from providers.gpus import Interconnect

PLACEHOLDER_SECRET = "orch-rehearsal-placeholder"
STEPS_LOG = "steps.log"
_WORD = re.compile(r"(?<!\S)([\w./+-]+)(?!\S)")


@dataclass(frozen=True, slots=True)
class LifePaths:
    """One machine's life: its home, work directory, and checkpoint directory."""

    root: Path

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def ckpt(self) -> Path:
        return self.root / "ckpt"

    @property
    def steps_log(self) -> Path:
        return self.work / STEPS_LOG

    @property
    def status(self) -> Path:
        return self.work / "status.json"

    @property
    def job_log(self) -> Path:
        return self.work / "job.log"


@dataclass(frozen=True, slots=True)
class World:
    """Everything the lives share: the manifest, where it lives, the local store, the notice URL."""

    manifest: Manifest
    code_dir: Path
    store: Path
    notice_url: str
    procs: int

    def _relocate(self, text: str, life: LifePaths) -> str:
        c = self.manifest.checkpoint
        if c is None or not c.path.startswith("/") or c.path == "/":
            return text
        base = c.path.rstrip("/")
        return re.sub(rf"(?<![\w/]){re.escape(base)}(?=/|\b|$)", str(life.ckpt), text)

    def _absolute_words(self, text: str) -> str:
        def repl(m: re.Match[str]) -> str:
            word = m.group(1)
            return str(self.code_dir / word) if not word.startswith("/") and (self.code_dir / word).is_file() \
                else word
        return _WORD.sub(repl, text)

    def render_input(self, life: LifePaths, port: int) -> RenderInput:
        """The node's RenderInput for ``life`` (see the module docstring for every substitution)."""
        facts = LaunchFacts(node_rank=0, master_addr="127.0.0.1", master_port=port, gpus_per_node=self.procs,
                            interconnect=Interconnect.PCIE, cloud=CloudKind.GCP, metadata_urls={"gcp": self.notice_url},
                            work_dir=str(life.work), sample_interval_s=2.0, notice_interval_s=0.25)
        ri = render_input_for(self.manifest, facts)
        ckpt = ri.checkpoint
        if ckpt is not None:
            ckpt = replace(ckpt, local_dir=str(life.ckpt) if ckpt.local_dir.startswith("/")
                           else ckpt.local_dir, store_uri=f"file://{self.store}", store_endpoint="",
                           notify_file=self._relocate(ckpt.notify_file, life) if ckpt.notify_file else "")
        fix = lambda s: self._absolute_words(self._relocate(s, life))  # noqa: E731
        env = {k: self._relocate(v, life) for k, v in ri.env}
        env.update(ORCH_STEPS_LOG=str(life.steps_log), ORCH_REHEARSAL="1", ORCH_CODE_DIR=str(self.code_dir))
        return replace(ri, nodes=1, node_rank=0, image="", setup=(), data=(), checkpoint=ckpt,
                       script=fix(ri.script) if ri.script else "", command=fix(ri.command) if ri.command else "",
                       args=tuple(fix(a) for a in ri.args), env=tuple(sorted(env.items())))

    def secret_values(self) -> dict[str, str]:
        return {name: os.environ.get(name, PLACEHOLDER_SECRET) for name in self.manifest.secrets}

    def notes(self, device: str) -> list[str]:
        """What the rehearsal does differently from the cloud, one sentence each."""
        m = self.manifest
        out = []
        if m.checkpoint is not None:
            out.append(f"checkpoint store {m.checkpoint.store} replaced by the local file://{self.store} "
                       "for the rehearsal")
        r = m.resources
        out.append(f"{plural(r.nodes, 'node')} x {plural(r.count, 'GPU')} rehearsed as 1 node x "
                   f"{plural(self.procs, 'process', 'processes')} on {device}")
        if m.image:
            out.append(f"image {m.image} not used: the job runs with this machine's Python")
        if m.setup:
            out.append(f"setup not run ({plural(len(m.setup), 'line')}): install what the job needs here first")
        if m.data:
            out.append("data not staged: " + ", ".join(d.source for d in m.data))
        missing = sorted(n for n in m.secrets if n not in os.environ)
        if missing:
            out.append(f"secrets not set here, given a placeholder value: {', '.join(missing)}")
        return out
