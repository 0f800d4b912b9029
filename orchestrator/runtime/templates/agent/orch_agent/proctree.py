"""The job's process tree (from /proc) and a signal sent to all of it."""

from __future__ import annotations

import os


def process_tree(root: int) -> list[int]:
    """``root`` and all its descendants (from /proc), parents first.

    Needed because launchers do not keep their ranks in one process group: torchrun starts every worker
    in a new session, so a signal to the job's process group never reaches the training processes.
    """
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])  # the command name may contain spaces and ')'
        children.setdefault(ppid, []).append(int(entry))
    tree, queue = [], [root]
    while queue:
        pid = queue.pop(0)
        tree.append(pid)
        queue.extend(sorted(children.get(pid, [])))
    return tree


def signal_tree(root: int, sig: int) -> int:
    """Send ``sig`` to ``root`` and every descendant; returns how many were signalled."""
    sent = 0
    for pid in process_tree(root):
        try:
            os.kill(pid, sig)
            sent += 1
        except ProcessLookupError:
            pass
    return sent
