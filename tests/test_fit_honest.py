"""`orch fit` says only what is true (issue 31): the precision is chosen per GPU (bf16 where the GPU has it, else
fp16, said in a note), "does not fit" is said only of memory, LINK is the chosen machine's interconnect from the
catalog (RTX 4090, L4 and A10G machines have no NVLink), and a GPU in the catalog is never "not in catalog"."""

from __future__ import annotations

import json
import re

from typer.testing import CliRunner

from orchestrator.cli.main import app
from orchestrator.offers.quote import resolve_gpu_names
from providers.catalog import load_catalog


def _fit(*args: str) -> tuple[int, str, str]:
    done = CliRunner().invoke(app, ["fit", *args])
    return done.exit_code, done.stdout, done.stderr


def _rows(text: str) -> dict[str, list[str]]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("GPU "))
    out = {}
    for line in lines[start + 1:]:
        if not re.match(r"^[A-Z0-9]+[A-Za-z0-9]*-\d+G ", line):
            break
        cells = line.split()
        out[cells[0]] = cells
    return out


def test_qlora_13b_fits_a_t4_in_fp16_with_a_note() -> None:
    code, out, err = _fit("--params", "13B", "--method", "qlora", "--gpu", "T4")
    assert code == 0, err
    assert "T4-16G" in _rows(out)
    assert "fp16 on T4-16G: it has no bf16" in " ".join(out.split())


def test_an_asked_precision_the_gpu_lacks_is_not_called_a_misfit() -> None:
    code, out, _ = _fit("--params", "7B", "--method", "lora", "--precision", "bf16")
    flat = " ".join(out.split())
    assert code == 0
    assert "cannot run the asked precision: " in flat and "T4-16G" in flat.split("cannot run the asked precision")[1]
    misfits = re.search(r"does not fit \(memory\): ([^.]*?) (cannot|GB/GPU)", flat)
    assert misfits is None or "T4-16G" not in misfits.group(1)


def test_link_is_the_machines_interconnect_and_catalog_gpus_resolve() -> None:
    # One machine of 4 (13B full needs 8x2: no RunPod or Vast.ai 4090 machine for a job of 2 nodes).
    code, out, err = _fit("--params", "20B", "--method", "lora", "--gpu", "A10,A10G,L4,4090")
    assert code == 0, err
    rows = _rows(out)
    for gpu in ("RTX4090-24G", "L4-24G", "A10G-24G"):      # multi-GPU machines of these are all PCIe
        assert rows[gpu][4] == "pcie", rows[gpu]
    assert "not in catalog" not in out
    assert rows["A10-24G"][4] == "-" and "no 4x offer" in out     # A10 is sold, in machines of 1 or 2
    names = sorted({o.gpu for o in load_catalog().offers})
    assert list(resolve_gpu_names(names)) == names
    assert resolve_gpu_names(["A10"]) == ("A10-24G",)


def test_a_shape_of_several_machines_is_priced_where_orch_launches_several() -> None:
    """70B full fine-tuning on RTX A6000s needs 8x5: RunPod sells the 8x machine, but orch launches single
    machines there (the planner's single-node-provider), so it was the cheapest offer of a gang nobody could run."""
    from orchestrator.fit.search import cheapest_offer
    from providers.base import Market
    from providers.registry import launches_multi_node

    code, out, err = _fit("--params", "70B", "--gpu", "RTXA6000", "--json")
    assert code in (0, 1), err
    [option] = json.loads(out)
    assert option["nodes"] > 1
    assert option["offer"] is None or launches_multi_node(option["offer"]["provider"]), option["offer"]
    offers = load_catalog().offers
    single = cheapest_offer(offers, "RTXA6000-48G", 8, frozenset(Market), False)
    assert single is not None and not launches_multi_node(single.provider)   # one machine: RunPod's, as before
    gang = cheapest_offer(offers, "RTXA6000-48G", 8, frozenset(Market), False, nodes=5)
    assert gang is None or launches_multi_node(gang.provider)
