"""The memory model against hand-computed figures from its cited sources (docs/fit.md).

Sources:
* ZeRO: Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models",
  section 3.1: mixed-precision Adam holds 2+2+12 = 16 bytes per parameter.
* DeepSpeed's estimators, deepspeed/runtime/zero/stage_1_and_2.py ``estimate_zero2_model_states_mem_needs``
  (GPU: 2·P + 18·P/N; offload: 2·P) and deepspeed/runtime/zero/stage3.py
  ``estimate_zero3_model_states_mem_needs`` (GPU: 4·largest_layer + 18·P/N; optimizer offload:
  4·largest_layer + 2·P/N; optimizer and weights offloaded: 4·largest_layer), github.com/deepspeedai/DeepSpeed
  (stage_1_and_2.py at 02aa38c3, stage3.py at 007cca6a). Re-stated below, not imported: deepspeed is no
  dependency.
* Hugging Face Transformers, "Model training anatomy" / "GPU memory usage": fp32 weights 4 B, gradients 4 B,
  AdamW 8 B, 8-bit AdamW 2 B per parameter.
* Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", eq. 1 and
  section 4.3: s·b·h·(34 + 5·a·s/h) bytes per layer; 2·s·b·h with full recomputation; 4·s·b·v for the logits.
* Dettmers et al. 2023, "QLoRA", section 3: NF4 with double quantization, 4 + 0.127 bits per parameter.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from orchestrator.fit.memory import (
    GB,
    Method,
    Offload,
    Optimizer,
    Precision,
    SetupError,
    Sharding,
    TrainingSetup,
    activation_bytes,
    estimate,
)
from orchestrator.fit.search import FitQuery, fit_all, fit_gpu, relaxations
from orchestrator.fit.shapes import ShapeError, guess_shape, known_model, parse_count, shape_from
from providers.catalog import load_catalog
from providers.gpus import gpu_by_name


def ds_zero2_gpu_bytes(total_params: float, gpus: int, cpu_offload: bool) -> float:
    """DeepSpeed ``estimate_zero2_model_states_mem_needs`` (GPU part), re-stated from its source."""
    return 2 * total_params if cpu_offload else 2 * total_params + int(18 * total_params / gpus)


def ds_zero3_gpu_bytes(total_params: float, largest_layer_params: float, gpus: int, cpu_offload: bool,
                       cpu_offload_params: bool) -> float:
    """DeepSpeed ``estimate_zero3_model_states_mem_needs`` (GPU part), re-stated from its source."""
    largest_layer_memory = 4 * largest_layer_params
    if cpu_offload and cpu_offload_params:
        return largest_layer_memory
    if cpu_offload:
        return largest_layer_memory + int(2 * total_params / gpus)
    return largest_layer_memory + int(18 * total_params / gpus)


def setup(model: str = "llama-2-7b", **kw: object) -> TrainingSetup:
    shape = known_model(model) if not model[0].isdigit() else guess_shape(parse_count(model))
    return TrainingSetup(shape, **kw)  # type: ignore[arg-type]


# -- model states ---------------------------------------------------------------------------------------

def test_7b_full_mixed_adamw_is_16_bytes_per_param_so_no_80gb_gpu_fits_without_sharding() -> None:
    s = setup("7B", method=Method.FULL, precision=Precision.BF16, optimizer=Optimizer.ADAMW)
    est = estimate(s, 1)
    assert est.model_states == pytest.approx(16 * 7e9)          # ZeRO paper: 2 + 2 + 12
    assert est.model_states / GB == pytest.approx(112.0)
    for name in ("H100-80G", "A100-80G"):
        assert not est.fits(gpu_by_name(name).vram_gb)
        # data parallel on more GPUs replicates it: still no
        assert not estimate(s, 8).fits(gpu_by_name(name).vram_gb)
        # ZeRO-3 across two, or ZeRO-Offload on one, does fit
        assert estimate(replace(s, sharding=Sharding.ZERO3), 2).fits(gpu_by_name(name).vram_gb)
        assert estimate(replace(s, sharding=Sharding.ZERO3, offload=Offload.OPTIMIZER), 1).fits(
            gpu_by_name(name).vram_gb)


def test_fp32_and_8bit_adam_bytes_follow_the_hugging_face_anatomy() -> None:
    fp32 = estimate(setup("7B", precision=Precision.FP32), 1)
    assert fp32.weights == pytest.approx(4 * 7e9) and fp32.gradients == pytest.approx(4 * 7e9)
    assert fp32.optimizer == pytest.approx(8 * 7e9)
    eight_bit = estimate(setup("7B", precision=Precision.FP32, optimizer=Optimizer.ADAMW_8BIT), 1)
    assert eight_bit.optimizer == pytest.approx(2 * 7e9)
    sgd = estimate(setup("7B", precision=Precision.FP32, optimizer=Optimizer.SGD), 1)
    assert sgd.optimizer == pytest.approx(4 * 7e9)


@pytest.mark.parametrize("model", ["llama-2-7b", "llama-3-8b", "llama-3-70b", "mistral-7b", "qwen2.5-72b"])
@pytest.mark.parametrize("gpus", [2, 8, 16, 64])
def test_zero3_per_gpu_matches_deepspeed_within_5_percent(model: str, gpus: int) -> None:
    s = setup(model, sharding=Sharding.ZERO3)
    shape = s.shape
    ours = estimate(s, gpus).model_states
    theirs = ds_zero3_gpu_bytes(shape.params, shape.largest_layer_params, gpus, False, False)
    assert ours == pytest.approx(theirs, rel=0.05)
    off = estimate(replace(s, offload=Offload.OPTIMIZER), gpus).model_states
    assert off == pytest.approx(ds_zero3_gpu_bytes(shape.params, shape.largest_layer_params, gpus, True, False),
                                rel=0.05)
    both = estimate(replace(s, offload=Offload.PARAMS), gpus).model_states
    assert both == pytest.approx(ds_zero3_gpu_bytes(shape.params, shape.largest_layer_params, gpus, True, True),
                                 rel=0.05)


@pytest.mark.parametrize("gpus", [1, 2, 8, 32])
def test_zero2_per_gpu_matches_deepspeed(gpus: int) -> None:
    s = setup("llama-3-8b", sharding=Sharding.ZERO2)
    assert estimate(s, gpus).model_states == pytest.approx(ds_zero2_gpu_bytes(s.shape.params, gpus, False), rel=0.01)
    off = replace(s, offload=Offload.OPTIMIZER)
    assert estimate(off, gpus).model_states == pytest.approx(ds_zero2_gpu_bytes(s.shape.params, gpus, True), rel=0.01)


def test_70b_full_fine_tune_needs_at_least_1_1_tb_across_the_gang() -> None:
    s = setup("llama-3-70b")
    assert estimate(s, 1).model_states >= 1.1e12                 # 16 B x 70.6B = 1.13 TB
    options = fit_all(FitQuery(s), load_catalog().offers)
    fitting = [o for o in options if o.fits]
    assert fitting
    for o in fitting:
        assert o.estimate.model_states * o.total_gpus >= 1.1e12, o.gpu.name
        assert o.total_gpus >= 16 and o.sharding is Sharding.ZERO3


def test_7b_qlora_fits_one_24gb_gpu() -> None:
    s = setup("llama-2-7b", method=Method.QLORA)
    est = estimate(s, 1)
    assert est.fits(24)
    # the quantized base: 4.127 bits per parameter outside the (16-bit) embeddings and head
    embed = s.shape.embedding_params
    assert est.weights == pytest.approx((s.shape.params - embed) * 4.127 / 8 + 2 * embed + 4 * s.trainable_params)
    for name in ("RTX4090-24G", "L4-24G", "A10G-24G"):
        option = fit_gpu(FitQuery(s), gpu_by_name(name), load_catalog().offers)
        assert option.fits and option.count == 1 and option.nodes == 1 and option.offer is not None


def test_lora_adapters_are_rank_times_in_plus_out_of_every_linear_layer() -> None:
    s = setup("llama-2-7b", method=Method.LORA, lora_rank=16)
    # per block: q,o (4096x4096), k,v (4096x4096: no GQA in Llama 2 7B), gate/up (4096x11008), down (11008x4096)
    per_block = 16 * (4 * (4096 + 4096) + 3 * (4096 + 11008))
    assert s.trainable_params == 32 * per_block
    est = estimate(s, 1)
    assert est.weights == pytest.approx(2 * s.shape.params + 4 * s.trainable_params)   # bf16 base + fp32 adapters
    assert est.optimizer == pytest.approx(8 * s.trainable_params)


# -- activations ----------------------------------------------------------------------------------------

def test_activations_follow_korthikanti() -> None:
    shape = known_model("llama-2-7b")       # h 4096, a 32, L 32, v 32000
    s, b = 2048, 1
    eager = TrainingSetup(shape, seq_len=s, micro_batch=b, checkpointing=False, flash_attention=False)
    per_layer = s * b * 4096 * (34 + 5 * 32 * s / 4096)
    logits = 4 * s * b * 32000
    assert activation_bytes(eager) == pytest.approx(32 * per_layer + logits)
    flash = replace(eager, flash_attention=True)
    assert activation_bytes(flash) == pytest.approx(32 * 34 * s * b * 4096 + logits)
    ckpt = replace(eager, checkpointing=True)
    assert activation_bytes(ckpt) == pytest.approx(32 * 2 * s * b * 4096 + per_layer + logits)
    assert activation_bytes(replace(flash, micro_batch=4)) == pytest.approx(4 * activation_bytes(flash))


# -- input ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "value"), [("70B", 70e9), ("7.2b", 7.2e9), ("350M", 350e6), ("1.5T", 1.5e12),
                                             ("70e9", 70e9)])
def test_parse_count(text: str, value: float) -> None:
    assert parse_count(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["-7B", "0", "seven", "7X", "12", "1e400", "1e16", "1001T", float("inf"),
                                  float("nan"), -1e9, 2e15])
def test_parse_count_refuses(text: str | float) -> None:
    with pytest.raises(ShapeError):
        parse_count(text)


def test_known_models_and_guesses() -> None:
    assert known_model("Meta-Llama-3-70B").hidden == 8192
    with pytest.raises(ShapeError, match="did you mean"):
        known_model("llama-3-7b")
    guess = guess_shape(7e9)
    assert 30 <= guess.layers <= 36 and 4000 <= guess.hidden <= 4400
    assert shape_from(7e9, layers=32, hidden=4096).hidden == 4096


def test_offload_without_zero_is_refused() -> None:
    with pytest.raises(SetupError, match="needs ZeRO"):
        setup(offload=Offload.OPTIMIZER)
    with pytest.raises(SetupError, match="zero3"):
        setup(sharding=Sharding.ZERO2, offload=Offload.PARAMS)


def test_relaxations_name_the_nearest_change() -> None:
    q = FitQuery(setup("70B", sharding=Sharding.DDP), auto_sharding=False, gpus=("H100-80G",))
    offers = load_catalog().offers
    assert not any(o.fits for o in fit_all(q, offers))
    hints = relaxations(q, offers)
    assert any(h.startswith("needs ZeRO-3 across") for h in hints)
    assert any("--method qlora on 1x H100-80G" in h for h in hints)


# -- the search over machine counts ---------------------------------------------------------------------

def _linear_fit(q: FitQuery, gpu_name: str, offers: list) -> tuple[int, int, bool, str | None]:
    """The search as it was: every shape up to ``q.max_nodes`` machines of 8, one after the other."""
    from orchestrator.fit import search

    gpu = gpu_by_name(gpu_name)
    q, _ = q.for_gpu(gpu)
    if search.precision_problem(gpu, q.setup.precision):
        return 1, 1, False, None
    counts = {1, 2, 4, 8} | {o.gpu_count for o in offers if o.gpu == gpu.name}
    shapes = sorted([(c, 1) for c in counts] + [(8, m) for m in range(2, q.max_nodes + 1)],
                    key=lambda cm: (cm[0] * cm[1], cm[1]))
    first_fit = last = None
    for count, nodes in shapes:
        last = search._option(q, gpu, count, nodes, offers)
        if last.fits and last.offer is not None:
            break
        if last.fits:
            first_fit = first_fit or last
    else:
        last = first_fit or last
    assert last is not None
    return last.count, last.nodes, last.fits, last.offer.instance_type if last.offer else None


@pytest.mark.parametrize("max_nodes", [1, 2, 3, 8, 37])
def test_the_bisected_search_answers_as_the_walk_over_every_machine_count(max_nodes: int) -> None:
    offers = list(load_catalog().offers)
    for size, method, sharding in (("7B", Method.FULL, Sharding.DDP), ("70B", Method.FULL, Sharding.ZERO3),
                                   ("405B", Method.FULL, Sharding.DDP), ("405B", Method.LORA, Sharding.DDP),
                                   ("2T", Method.FULL, Sharding.ZERO3), ("1000T", Method.FULL, Sharding.DDP)):
        for auto in (True, False):
            q = FitQuery(setup(size, method=method, sharding=sharding), auto_sharding=auto, max_nodes=max_nodes,
                         auto_precision=True)
            for gpu in ("T4-16G", "A10G-24G", "A100-40G", "H100-80G", "B200-180G"):
                o = fit_gpu(q, gpu_by_name(gpu), offers)
                found = (o.count, o.nodes, o.fits, o.offer.instance_type if o.offer else None)
                assert found == _linear_fit(q, gpu, offers), (size, method, sharding, auto, gpu)


def test_the_search_does_not_grow_with_max_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model no machine count fits: 256 machines cost a bisection (about log2 256 = 8 more estimates a strategy
    than 8 machines), not 248 more tries."""
    from orchestrator.fit import search

    calls: list[int] = []

    def counting(s: TrainingSetup, gpus: int = 1):  # type: ignore[no-untyped-def]
        calls.append(gpus)
        return estimate(s, gpus)

    monkeypatch.setattr(search, "estimate", counting)
    offers = list(load_catalog().offers)
    cost = {}
    for max_nodes in (8, 256):
        calls.clear()
        found = fit_gpu(FitQuery(setup("1000T"), max_nodes=max_nodes), gpu_by_name("H100-80G"), offers)
        assert not found.fits and (found.count, found.nodes) == (8, max_nodes)
        cost[max_nodes] = len(calls)
    assert cost[256] <= cost[8] + 3 * 8, cost    # 3 strategies (DDP, ZeRO-2, ZeRO-3)


def test_more_machines_are_hinted_with_the_count_that_fits() -> None:
    q = FitQuery(setup("405B"), gpus=("A100-40G",), max_nodes=2)
    offers = load_catalog().offers
    assert not any(o.fits for o in fit_all(q, offers))
    [hint] = [h for h in relaxations(q, offers) if "--max-nodes" in h]
    nodes = fit_gpu(replace(q, max_nodes=256), gpu_by_name("A100-40G"), offers).nodes
    assert hint.startswith(f"fits with --max-nodes {nodes} on 8x A100-40G x{nodes} nodes"), hint
