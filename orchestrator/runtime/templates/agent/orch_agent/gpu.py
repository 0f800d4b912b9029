"""GPU samples: nvidia-smi's CSV, parsed, in a rolling window. A missing nvidia-smi or "[N/A]" fields are not
errors: the sampler says so and the agent goes on."""

from __future__ import annotations

import collections
import subprocess
from collections.abc import Callable
from typing import Any

NVIDIA_SMI_QUERY = ["nvidia-smi", "--query-gpu=index,utilization.gpu,memory.used,memory.total,power.draw",
                    "--format=csv,noheader,nounits"]


def _number(field: str) -> float | None:
    field = field.strip()
    if not field or field.startswith("[") or field.upper() in ("N/A", "NA"):
        return None  # "[N/A]", "[Not Supported]", "[Unknown Error]"
    try:
        return float(field)
    except ValueError:
        return None


def parse_nvidia_smi(text: str) -> list[dict[str, Any]]:
    """Parse nvidia-smi CSV (index, util %, mem used MiB, mem total MiB, power W); unknown fields -> None."""
    gpus = []
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 5 or not fields[0].isdigit():
            continue
        util, used, total, power = (_number(f) for f in fields[1:])
        gpus.append({"index": int(fields[0]), "util": util, "mem_used_mib": used, "mem_total_mib": total,
                     "power_w": power})
    return gpus


class GpuSampler:
    """Keeps the last ``window`` samples. ``run`` is injectable: (argv, timeout) -> stdout text."""

    def __init__(self, window: int, run: Callable[[list[str], float], str] | None = None) -> None:
        self.samples: collections.deque[dict[str, Any]] = collections.deque(maxlen=window)
        self.available = True
        self.error: str | None = None
        self._run = run or self._run_nvidia_smi

    @staticmethod
    def _run_nvidia_smi(argv: list[str], timeout: float) -> str:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=True)
        return out.stdout

    def sample(self, now: float) -> None:
        try:
            text = self._run(NVIDIA_SMI_QUERY, 10.0)
        except FileNotFoundError:
            self.available, self.error = False, "nvidia-smi not found"
            return
        except (subprocess.SubprocessError, OSError) as exc:
            self.error = f"nvidia-smi failed: {exc}"
            return
        self.available, self.error = True, None
        self.samples.append({"time": now, "gpus": parse_nvidia_smi(text)})

    def summary(self) -> dict[str, Any]:
        utils = [g["util"] for s in self.samples for g in s["gpus"] if g["util"] is not None]
        mems = [g["mem_used_mib"] for s in self.samples for g in s["gpus"] if g["mem_used_mib"] is not None]
        last = self.samples[-1] if self.samples else None
        last_utils = [g["util"] for g in last["gpus"] if g["util"] is not None] if last else []
        return {
            "samples": len(self.samples),
            "gpus": len(last["gpus"]) if last else 0,
            "window_s": (self.samples[-1]["time"] - self.samples[0]["time"]) if self.samples else 0.0,
            "mean_util": sum(utils) / len(utils) if utils else None,
            "max_util": max(utils) if utils else None,
            "last_mean_util": sum(last_utils) / len(last_utils) if last_utils else None,
            "max_mem_used_mib": max(mems) if mems else None,
        }
