"""What one tick reports, and what it has done so far (so a later step never acts on a stale record)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TickReport:
    launched: int = 0
    adopted: int = 0
    preempted: int = 0
    relaunched: int = 0
    terminated: int = 0
    orphans_terminated: int = 0
    idle_stopped: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def quiet(self) -> bool:
        """Nothing changed: the clouds and the store agree."""
        return not (self.launched or self.adopted or self.preempted or self.relaunched or self.terminated
                    or self.orphans_terminated or self.idle_stopped)


@dataclass
class TickLog:
    """The tick's running record: its report, and the attempts its steps have ended. Facts are read once,
    at the tick's start; a step ending an attempt adds it to ``ended`` so later steps leave it alone."""

    report: TickReport = field(default_factory=TickReport)
    ended: set[int] = field(default_factory=set)
    #: (job id, provider) whose boot script could not be built this tick: its other offers are not tried.
    unbootable: set[tuple[int, str]] = field(default_factory=set)
