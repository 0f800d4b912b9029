#!/usr/bin/env python3
"""Build orch's shipped GPU catalog from the reference snapshot of public list prices.

    python scripts/build_catalog.py ../shared/reference/gpu_offers_snapshot.csv

Writes providers/catalog/data/offers.csv (one row per offer and market) and
providers/catalog/data/catalog.json (provenance, as-of dates and every row left out, with why).
The output is deterministic: the same input gives byte-identical files, so the committed data can be
checked by rebuilding (tests do when the snapshot is present).

Policy (docs/catalog.md says the same, for users):
* GCP regions whose GPU on-demand price looks like a discounted SKU (per-GPU on-demand under 0.6x the
  dearest region's for that machine type, or under its own spot price) are NOT list prices: their
  on-demand row is dropped and recorded in catalog.json; their spot row is kept.
* RunPod "spot" rows are dropped: SpotPrice equals Price in the source (no real interruptible
  discount), and RunPod retired interruptible pods in September 2026. RunPod is on-demand only.
* Any spot price not below its on-demand price (Azure ND96isr_H100_v5) is not a spot discount: dropped.
* The source has no capture dates. Prices carry the approximate as-of of their source generation and
  are marked approximate.
* AWS on-demand rows name no zone: the snapshot's AWS zone is the AZ with the lowest spot price (it can be a
  Local Zone that needs opt-in), and on-demand prices are per region. Spot rows keep it.
* Vast.ai rows leave vcpus and memory_gb empty (unknown): the source's Vast instance names
  (``1x-H100_SXM-32-65536``) carry SkyPilot's placeholder 32 vCPU / 64 GB for every row, not the machines'.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from providers.catalog.interconnect import interconnect_for  # noqa: E402
from providers.gpus import resolve_gpu  # noqa: E402

OUT_DIR = ROOT / "providers" / "catalog" / "data"

PROVIDER_NAMES = {"vast": "vastai"}

# The source files' commit dates are unknown; these follow the reference README's reasoning.
AS_OF = {
    "aws": ("2025-12-01", "late 2025 (approximate): the source lists p6-b300 and m8i types"),
    "gcp": ("2025-12-01", "late 2025 (approximate): the source lists a3-ultragpu (H200) and a4 (B200)"),
    "runpod": ("2025-12-01", "late 2025 (approximate): same catalog generation as aws/gcp"),
    "vastai": ("2025-12-01", "late 2025 (approximate): same catalog generation as aws/gcp"),
    "lambda": ("2025-12-01", "late 2025 (approximate): same catalog generation as aws/gcp"),
    "azure": ("2024-06-01", "2024 (approximate): older catalog folder, has H100 v5 but no H200 VMs"),
}

#: Providers whose vCPU/RAM columns in the source are placeholders, not the machines' (see the docstring).
UNKNOWN_SPECS = ("vastai",)


def _f(value: str) -> float | None:
    value = value.strip()
    if not value:
        return None
    number = float(value)
    return number if number > 0 else None


# The reference snapshot's README names these GCP regions as suspect (per-GPU on-demand price under 0.6x
# the dearest region's for that GPU, or under its spot price: a discounted SKU such as DWS/flex-start
# picked up as on-demand). The per-GPU test needs the accelerator part alone, which the snapshot's totals
# no longer separate, so the list is taken as published there.
SUSPECT_GCP_REGIONS: dict[str, tuple[str, ...]] = {
    "a2-highgpu-": ("europe-west4", "asia-southeast1", "asia-northeast1"),
    "a2-ultragpu-": ("us-central1", "europe-west4", "us-east4"),
    "a3-highgpu-8g": ("us-central1", "us-west1", "us-west4"),
    "a3-ultragpu-8g": ("asia-south1", "europe-west4", "europe-west1"),
}


def is_suspect_gcp(instance_type: str, region: str) -> bool:
    return any(instance_type.startswith(prefix) and region in regions
               for prefix, regions in SUSPECT_GCP_REGIONS.items())


def _price(value: float) -> str:
    """A price as the source gives it, to the micro-dollar (as a refreshed catalog writes them). ``:g`` kept 6
    significant digits only: 21.957642 became 21.9576, 113.9328 became 113.933."""
    return repr(round(value, 6))


def _on_demand_place(provider: str, base: list[str]) -> list[str]:
    """An on-demand row's place. The snapshot's AWS zone is the AZ with the lowest *spot* price (sometimes a Local
    Zone such as use1-atl2-az1, which needs opt-in): AWS on-demand prices are per region, so the on-demand row
    names no zone (as a refreshed catalog's), and a launch is not pinned to the spot market's cheapest AZ."""
    if provider != "aws":
        return base
    return [*base[:3], "", *base[4:]]


def build(snapshot: Path) -> tuple[list[list[str]], dict[str, object]]:
    with snapshot.open(newline="") as f:
        rows = list(csv.DictReader(f))
    out: list[list[str]] = []
    excluded: list[dict[str, str]] = []
    for r in rows:
        provider = PROVIDER_NAMES.get(r["provider"], r["provider"])
        count = int(r["gpu_count"])
        vram = float(r["gpu_memory_gb"])
        model = resolve_gpu(r["gpu"], vram_gb=vram)
        as_of, _ = AS_OF[provider]
        known_specs = provider not in UNKNOWN_SPECS
        base = [
            provider, r["instance_type"], r["region"], r["zone"], model.name, str(count), f"{vram:g}",
            f"{float(r['vcpus']):g}" if known_specs else "", f"{float(r['memory_gb']):g}" if known_specs else "",
            interconnect_for(provider, r["instance_type"], count).value,
        ]
        od = _f(r["price_ondemand_usd_hr"])
        spot = _f(r["price_spot_usd_hr"])
        ident = {"provider": provider, "instance_type": r["instance_type"], "region": r["region"]}
        if od is not None:
            if provider == "gcp" and is_suspect_gcp(r["instance_type"], r["region"]):
                excluded.append({**ident, "market": "on-demand", "price_hr": _price(od),
                                 "reason": "GPU on-demand price looks like a discounted SKU, not a list price"})
            else:
                out.append([*_on_demand_place(provider, base), "on-demand", _price(od), as_of, "true"])
        if spot is not None:
            if provider == "runpod":
                excluded.append({**ident, "market": "spot", "price_hr": _price(spot),
                                 "reason": "RunPod has no spot market (interruptible pods retired Sept 2026)"})
            elif od is not None and spot >= od:
                excluded.append({**ident, "market": "spot", "price_hr": _price(spot),
                                 "reason": "spot price not below on-demand: not a spot discount"})
            else:
                out.append([*base, "spot", _price(spot), as_of, "true"])
    out.sort(key=lambda row: (row[0], row[1], row[2], row[10]))
    meta: dict[str, object] = {
        "source": "public list prices extracted from the SkyPilot catalog (skypilot-org/skypilot-catalog)",
        "source_commits": sorted({f"{r['provider']}:{r['source_file']}@{r['source_commit']}" for r in rows}),
        "as_of": {p: {"date": d, "note": note} for p, (d, note) in sorted(AS_OF.items())},
        "approximate": True,
        "offers": len(out),
        "excluded": excluded,
    }
    return out, meta


HEADER = [
    "provider", "instance_type", "region", "zone", "gpu", "gpu_count", "vram_gb", "vcpus", "memory_gb",
    "interconnect", "market", "price_hr", "price_as_of", "price_as_of_approximate",
]


def write(out_dir: Path, rows: list[list[str]], meta: dict[str, object]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    with (out_dir / "offers.csv").open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(HEADER)
        w.writerows(rows)
    (out_dir / "catalog.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    rows, meta = build(Path(argv[1]))
    write(OUT_DIR, rows, meta)
    print(f"wrote {len(rows)} offers, {len(meta['excluded'])} excluded rows to {OUT_DIR}")  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
