"""A tiny, deterministic PyTorch DDP job (gloo, CPU) that checkpoints and resumes exactly.

Run: torchrun --nproc-per-node 2 examples/train_tiny.py --steps 20 --ckpt-dir ckpt --out final.pt

Checkpoint convention (docs/runtime.md): <ckpt-dir>/step-<N>/ holds model.pt + optim.pt (rank 0),
rng-rank<R>.pt (every rank) and meta.json (step = data position); the COMPLETE marker is written
last, after every rank has finished writing (by each machine's local rank 0, so that on several nodes
each node's agent knows its part is complete). Checkpoints happen every --ckpt-every steps and when
asked to "checkpoint now": the --checkpoint-signal arrives, or the --checkpoint-file appears (then
deleted). Ranks agree on the step through an all-reduce, so all of them checkpoint the same step.

Resume: --resume-from DIR (or $ORCH_RESUME_PATH / the env var named by --resume-env) continues at
the step after the checkpoint. Rank 0 appends "step <N> loss <x>" to --steps-log (default $ORCH_STEPS_LOG, else
steps.log) for each step done.
Test aids (tests/e2e), so that a test's kill or check meets the job where the test says, never racing a job
this tiny to its end: --hold-at-step N (repeatable) waits after step N until a checkpoint-now request arrives;
--hang-after-hold then hangs until killed (a reclaimed machine); --hang-at-step N hangs after step N (and the
checkpoint due there) until killed, in a run that did not resume (a machine that dies mid-run: its replacement,
resuming, goes on). None of them touches an RNG: the weights are those of a run without them. --step-sleep S
sleeps S seconds after every step (a real job's pace, for `orch rehearse` on examples/torchrun-ddp.yaml).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time
import warnings
from pathlib import Path

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")  # CPU wheel without numpy

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

MARKER = "COMPLETE"
_requested = False


def _on_signal(_signum: int, _frame: object) -> None:
    global _requested
    _requested = True


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--batch", type=int, default=16, help="per rank")
    p.add_argument("--ckpt-dir", default=os.environ.get("ORCH_CHECKPOINT_DIR", "checkpoints"))
    p.add_argument("--ckpt-every", type=int, default=5)
    p.add_argument("--resume-from", default="")
    p.add_argument("--resume-env", default="ORCH_RESUME_PATH", help="env var read when --resume-from is empty")
    p.add_argument("--checkpoint-signal", default=os.environ.get("ORCH_CHECKPOINT_SIGNAL", "SIGUSR1"))
    p.add_argument("--checkpoint-file", default=os.environ.get("ORCH_CHECKPOINT_NOW_FILE", ""))
    # ORCH_STEPS_LOG: where orch (e.g. `orch rehearse`) reads the job's progress from.
    p.add_argument("--steps-log", default=os.environ.get("ORCH_STEPS_LOG", "steps.log"))
    p.add_argument("--out", default="final.pt")
    p.add_argument("--hold-at-step", type=int, action="append", default=[],
                   help="(tests) after step N, wait for a checkpoint-now request (repeatable)")
    p.add_argument("--hang-after-hold", action="store_true",
                   help="(tests) after a held step's checkpoint, hang until killed, like a reclaimed machine")
    p.add_argument("--hang-at-step", type=int, default=0,
                   help="(tests) in a run that did not resume, hang after step N (and its checkpoint) until killed")
    # Seconds to sleep after each step: paces this tiny job like a real one (examples/torchrun-ddp.yaml), so
    # `orch rehearse`'s preemption lands between steps as it would. Sleeping touches no RNG: weights unchanged.
    p.add_argument("--step-sleep", type=float, default=0.0)
    return p.parse_args()


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 1))


def _batch(seed: int, step: int, rank: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    # The data for a step depends only on (seed, step, rank): the data position is the step number.
    g = torch.Generator().manual_seed(seed * 1_000_003 + step * 101 + rank)
    x = torch.randn(size, 8, generator=g)
    y = x.sum(dim=1, keepdim=True) * 0.5 + torch.randn(size, 1, generator=g) * 0.01
    return x, y


def _checkpoint_requested(args: argparse.Namespace) -> bool:
    global _requested
    if args.checkpoint_file and os.path.exists(args.checkpoint_file):
        try:
            os.unlink(args.checkpoint_file)
        except FileNotFoundError:
            pass
        _requested = True
    hit, _requested = _requested, False
    return hit


def _agree(flag: bool) -> bool:
    t = torch.tensor([1 if flag else 0])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def _save(args: argparse.Namespace, step: int, model: DDP, optim: torch.optim.Optimizer, rank: int) -> None:
    final = Path(args.ckpt_dir) / f"step-{step}"
    final.mkdir(parents=True, exist_ok=True)
    torch.save({"torch": torch.get_rng_state(), "python": random.getstate()}, final / f"rng-rank{rank}.pt")
    if rank == 0:
        torch.save(model.module.state_dict(), final / "model.pt")
        torch.save(optim.state_dict(), final / "optim.pt")
        (final / "meta.json").write_text(json.dumps({"step": step, "seed": args.seed}) + "\n")
    dist.barrier()  # every rank's files are on disk before the marker says "complete"
    # One marker per machine (its local rank 0): on several nodes each one's agent uploads its own part.
    if int(os.environ.get("LOCAL_RANK", rank)) == 0:
        with open(final / MARKER, "w") as fh:
            fh.write(f"{step}\n")
            fh.flush()
            os.fsync(fh.fileno())
    dist.barrier()


def _resume_dir(args: argparse.Namespace) -> Path | None:
    """The checkpoint to resume from, if any; one without its marker is refused (exit 1)."""
    resume = args.resume_from or os.environ.get(args.resume_env, "")
    if resume and not (Path(resume) / MARKER).is_file():
        raise SystemExit(f"{resume} has no {MARKER} marker: not a complete checkpoint")
    return Path(resume) if resume else None


def _load(path: Path, model: nn.Module, optim: torch.optim.Optimizer, rank: int) -> int:
    model.load_state_dict(torch.load(path / "model.pt", weights_only=True))
    optim.load_state_dict(torch.load(path / "optim.pt", weights_only=True))
    rng = torch.load(path / f"rng-rank{rank}.pt", weights_only=False)
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    return int(json.loads((path / "meta.json").read_text())["step"])


def main() -> None:
    args = _args()
    # Refused before joining the process group and building the model (DDP and torch.optim import
    # torch._dynamo: seconds of CPU per rank): a bad checkpoint fails fast.
    resume = _resume_dir(args)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    signal.signal(getattr(signal, args.checkpoint_signal), _on_signal)

    torch.manual_seed(args.seed)  # same initial weights on every rank
    model = _model()
    optim = torch.optim.Adam(model.parameters(), lr=0.01)
    torch.manual_seed(args.seed + 1 + rank)  # per-rank dropout stream, saved and restored with the checkpoint
    random.seed(args.seed + rank)

    done = _load(resume, model, optim, rank) if resume else 0
    ddp = DDP(model)
    loss_fn = nn.MSELoss()
    log = open(args.steps_log, "a") if rank == 0 else None  # noqa: SIM115

    for step in range(done + 1, args.steps + 1):
        x, y = _batch(args.seed, step, rank, args.batch)
        optim.zero_grad()
        loss = loss_fn(ddp(x), y)
        loss.backward()
        optim.step()
        if log is not None:
            log.write(f"step {step} loss {loss.item():.6f}\n")
            log.flush()
        held = step in args.hold_at_step
        if held:
            while not _agree(_requested or bool(args.checkpoint_file and os.path.exists(args.checkpoint_file))):
                time.sleep(0.05)  # a test aid: wait for the external checkpoint-now request
        if args.step_sleep > 0:
            time.sleep(args.step_sleep)
        now = _agree(_checkpoint_requested(args))
        if now or step % args.ckpt_every == 0:
            _save(args, step, ddp, optim, rank)
        if (held and args.hang_after_hold) or (step == args.hang_at_step and done == 0):
            while True:  # the test kills the tree; finishing here would race it
                time.sleep(0.05)

    if rank == 0:
        torch.save(model.state_dict(), args.out)
    if log is not None:
        log.close()
    # Fix found by the e2e: without this barrier a rank sometimes tears gloo down while its peer is still
    # in the last collective or saving, and the process aborts at exit ("terminate called without an
    # active exception", exit -6) after all the work was done, turning a finished job into a failed one.
    dist.barrier()
    dist.destroy_process_group()
    # The barrier narrowed but did not close it: gloo's background threads can still abort the interpreter's
    # own teardown (seen in a fresh-clone CI run). Every file is written and closed by now, so leave without
    # running C++ static destructors.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
