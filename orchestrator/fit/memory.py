"""How much GPU memory one GPU needs to train a model: model states, activations, overhead.

Every figure is in bytes per GPU; docs/fit.md derives each formula and cites its source. In short:

* Model states (weights, gradients, optimizer states) are parameters x bytes, by method, precision,
  optimizer and sharding. Unsharded mixed-precision AdamW holds 16 bytes per parameter (Rajbhandari et al.
  2020, "ZeRO", section 3.1: 2+2+12); the ZeRO stages follow DeepSpeed's own estimators
  (``estimate_zero2_model_states_mem_needs``: 2 + 18/N; ``estimate_zero3_model_states_mem_needs``:
  18/N + 4 x largest layer), FSDP keeps 16/N (fp32 shards of weights, gradients and Adam's two moments).
* Activations follow Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
  Models": s·b·h·(34 + 5·a·s/h) per layer, 34·s·b·h when attention does not keep the s x s scores
  (FlashAttention / selective recomputation), 2·s·b·h per layer with full activation checkpointing (plus one
  layer recomputed during the backward pass), and 4·s·b·v for the fp32 logits of the loss.
* A fixed allowance for the CUDA context, library workspaces and NCCL buffers; ``fits`` keeps a headroom
  fraction of the GPU free for allocator fragmentation and peaks.

Standard library only: ``orch fit`` imports this on every call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from orchestrator.fit.shapes import Architecture, ModelShape

GB = 1e9


class Method(StrEnum):
    FULL = "full"
    LORA = "lora"
    QLORA = "qlora"


class Precision(StrEnum):
    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"

    @property
    def mixed(self) -> bool:
        return self is not Precision.FP32


class Optimizer(StrEnum):
    ADAMW = "adamw"
    ADAMW_8BIT = "adamw-8bit"
    SGD = "sgd"

    @property
    def state_bytes(self) -> float:
        """Bytes of state per trainable parameter (Hugging Face, "Model training anatomy": AdamW keeps two fp32
        moments, 8 bytes; bitsandbytes' 8-bit AdamW 2 bytes; SGD with momentum one fp32 buffer, 4 bytes)."""
        return {Optimizer.ADAMW: 8.0, Optimizer.ADAMW_8BIT: 2.0, Optimizer.SGD: 4.0}[self]


class Sharding(StrEnum):
    DDP = "ddp"          # every GPU holds everything (also: a single GPU)
    ZERO1 = "zero1"      # optimizer states (and fp32 master weights/gradients) sharded
    ZERO2 = "zero2"      # + 16-bit gradients sharded
    ZERO3 = "zero3"      # + weights sharded, gathered one layer at a time
    FSDP = "fsdp"        # PyTorch FSDP FULL_SHARD with bf16 mixed precision

    @property
    def shards_weights(self) -> bool:
        return self in (Sharding.ZERO3, Sharding.FSDP)


class Offload(StrEnum):
    NONE = "none"
    OPTIMIZER = "optimizer"   # ZeRO-Offload: optimizer states, fp32 master weights and gradients in CPU RAM
    PARAMS = "params"         # also the weights (ZeRO-3 / FSDP only)


class SetupError(ValueError):
    """A combination that cannot run (e.g. offloaded weights without ZeRO-3); the message says the fix. A fix that
    is one setting's value (``setting``, ``values``) is said as ``orch fit``'s flag; a caller with other words for
    the setting (a manifest's field) says it from ``problem``, ``setting`` and ``values``."""

    def __init__(self, problem: str, setting: str | None = None, values: str = "") -> None:
        super().__init__(f"{problem}: use --{setting} {values}" if setting else problem)
        self.problem, self.setting, self.values = problem, setting, values


#: Bytes per parameter of a 4-bit NF4 base with double quantization: 4 bits + 0.127 bits of quantization
#: constants (Dettmers et al. 2023, "QLoRA", section 3, Double Quantization).
QLORA_BASE_BYTES = (4 + 0.127) / 8
#: The CUDA context with PyTorch's kernels, cuBLAS/cuDNN workspaces (single GPU) ...
CONTEXT_BYTES = 1.0 * GB
#: ... plus NCCL's communicator buffers when several GPUs talk.
NCCL_BYTES = 0.5 * GB
#: A UNet's activations per sample at 1024x1024 (not transformer-shaped): an assumption, not a sourced
#: figure; with / without gradient checkpointing.
UNET_ACTIVATION_BYTES = (2.0 * GB, 8.0 * GB)
DEFAULT_HEADROOM = 0.10


@dataclass(frozen=True, slots=True)
class TrainingSetup:
    """What is trained and how. ``micro_batch`` is per GPU; ``checkpointing`` is full activation checkpointing;
    ``flash_attention`` means the s x s attention scores are not kept (FlashAttention / SDPA)."""

    shape: ModelShape
    method: Method = Method.FULL
    precision: Precision = Precision.BF16
    optimizer: Optimizer = Optimizer.ADAMW
    sharding: Sharding = Sharding.DDP
    offload: Offload = Offload.NONE
    seq_len: int = 2048
    micro_batch: int = 1
    checkpointing: bool = True
    lora_rank: int = 16
    flash_attention: bool = True

    def __post_init__(self) -> None:
        if self.seq_len < 1 or self.micro_batch < 1 or self.lora_rank < 1:
            raise SetupError("sequence length, micro-batch and LoRA rank must be 1 or more")
        if self.offload is Offload.OPTIMIZER and self.sharding is Sharding.DDP:
            raise SetupError("optimizer offload needs ZeRO or FSDP (sharding zero1, zero2, zero3 or fsdp)")
        if self.offload is Offload.PARAMS and not self.sharding.shards_weights:
            raise SetupError("offloading weights needs sharding zero3 or fsdp")
        if self.method is Method.QLORA and self.precision is Precision.FP32:
            raise SetupError("QLoRA computes in 16-bit", "precision", "bf16 or fp16")

    @property
    def trainable_params(self) -> float:
        return self.shape.params if self.method is Method.FULL else lora_params(self.shape, self.lora_rank)

    @property
    def frozen_params(self) -> float:
        return 0.0 if self.method is Method.FULL else self.shape.params


def lora_params(shape: ModelShape, rank: int) -> float:
    """Adapter parameters with LoRA on every linear layer of every block (as QLoRA recommends): each adapted
    d_in x d_out matrix adds rank·(d_in + d_out). Per block: q (h,h), k and v (h,kv), o (h,h), gate and up
    (h,ffn), down (ffn,h), so rank·(9h + 2·kv + 3·ffn)."""
    h, kv, f = shape.hidden, shape.kv_dim, shape.ffn
    return float(shape.layers * rank * (9 * h + 2 * kv + 3 * f))


@dataclass(frozen=True, slots=True)
class _Part:
    component: str        # weights | gradients | optimizer
    bytes_per_param: float
    sharded: bool
    on_cpu: bool = False


def _trainable_parts(s: TrainingSetup) -> list[_Part]:
    """Bytes per trainable parameter, by precision and sharding (docs/fit.md, "Model states")."""
    o, z = s.optimizer.state_bytes, s.sharding
    opt_off = s.offload is not Offload.NONE
    w_off = s.offload is Offload.PARAMS
    w_sharded = z.shards_weights
    if not s.precision.mixed:
        return [_Part("weights", 4, w_sharded, w_off),
                _Part("gradients", 4, z is not Sharding.ZERO1 and z is not Sharding.DDP, opt_off),
                _Part("optimizer", o, z is not Sharding.DDP, opt_off)]
    fp8_cache = [_Part("weights", 1, w_sharded, w_off)] if s.precision is Precision.FP8 else []
    if z is Sharding.DDP:
        # PyTorch AMP: fp32 weights and gradients; the 16-bit casts are transient (ZeRO paper: 16 B/param).
        return [_Part("weights", 4, False), *fp8_cache, _Part("gradients", 4, False), _Part("optimizer", o, False)]
    if z is Sharding.FSDP:
        return [_Part("weights", 4, True, w_off), *fp8_cache, _Part("gradients", 4, True, opt_off),
                _Part("optimizer", o, True, opt_off)]
    # DeepSpeed's mixed-precision engine: a 16-bit working copy plus fp32 master weights, fp32 gradient
    # partitions and the optimizer states. ZeRO-1/2 also keep a 16-bit gradient buffer (ZeRO-2 shards it);
    # ZeRO-3 reduces straight into the fp32 partitions (its estimator counts 18 B/param with Adam).
    parts = [_Part("weights", 2, w_sharded, w_off), *fp8_cache, _Part("weights", 4, True, opt_off),
             _Part("gradients", 4, True, opt_off), _Part("optimizer", o, True, opt_off)]
    if z is not Sharding.ZERO3:
        parts.append(_Part("gradients", 2, z is Sharding.ZERO2, opt_off))
    return parts


def _frozen_bytes(s: TrainingSetup) -> float:
    """The frozen base of LoRA/QLoRA, in bytes (all of it; the caller shards it under ZeRO-3/FSDP)."""
    shape = s.shape
    if s.method is Method.QLORA:
        # NF4 for the linear layers; embeddings and the output head stay 16-bit (bitsandbytes skips them).
        embed = min(shape.embedding_params, shape.params)
        return (shape.params - embed) * QLORA_BASE_BYTES + embed * 2
    return shape.params * (4 if s.precision is Precision.FP32 else 2)


def activation_bytes(s: TrainingSetup) -> float:
    """Activations kept for the backward pass on one GPU (Korthikanti et al. 2022; docs/fit.md)."""
    shape = s.shape
    b, seq = s.micro_batch, s.seq_len
    if shape.architecture is Architecture.DIFFUSION_UNET:
        return b * UNET_ACTIVATION_BYTES[0 if s.checkpointing else 1]
    sbh = seq * b * shape.hidden
    attention_scores = 0.0 if s.flash_attention else 5 * shape.heads * seq / shape.hidden
    layer = sbh * (34 + attention_scores)                   # eq. 1 (16-bit values, 1-byte dropout masks)
    kept = shape.layers * 2 * sbh + layer if s.checkpointing else shape.layers * layer
    if s.precision is Precision.FP32:
        kept *= 2                                           # 4-byte values instead of 2
    return kept + 4 * seq * b * shape.vocab                 # section 4.3: fp32 logits for the loss


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    """Bytes on ONE GPU of a gang of ``gpus``; ``cpu_bytes`` is what offload moves to each machine's RAM
    (per GPU, before any buffer factor)."""

    gpus: int
    weights: float
    gradients: float
    optimizer: float
    gather: float
    activations: float
    overhead: float
    cpu_bytes: float = 0.0
    notes: tuple[str, ...] = field(default=())

    @property
    def model_states(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.gather

    @property
    def total(self) -> float:
        return self.model_states + self.activations + self.overhead

    @property
    def total_gb(self) -> float:
        return self.total / GB

    def fits(self, vram_gb: float, headroom: float = DEFAULT_HEADROOM) -> bool:
        return self.total <= usable_bytes(vram_gb, headroom)

    def to_json(self) -> dict[str, float]:
        return {k: round(v / GB, 2) for k, v in (
            ("weights_gb", self.weights), ("gradients_gb", self.gradients), ("optimizer_gb", self.optimizer),
            ("gather_gb", self.gather), ("activations_gb", self.activations), ("overhead_gb", self.overhead),
            ("cpu_offload_gb", self.cpu_bytes), ("total_gb", self.total))}


def usable_bytes(vram_gb: float, headroom: float = DEFAULT_HEADROOM) -> float:
    """A GPU's nominal memory (its "80 GB", taken as 10^9-byte GB: the GiB it really has is left as margin
    for driver-reserved memory) less the headroom fraction."""
    return vram_gb * GB * (1.0 - headroom)


def estimate(s: TrainingSetup, gpus: int = 1) -> MemoryEstimate:
    """Per-GPU memory for training ``s`` on ``gpus`` GPUs in one data-parallel (and sharding) group."""
    if gpus < 1:
        raise SetupError(f"GPU count must be 1 or more, got {gpus}")
    n = gpus
    sums = {"weights": 0.0, "gradients": 0.0, "optimizer": 0.0}
    cpu = 0.0
    for part in _trainable_parts(s):
        size = s.trainable_params * part.bytes_per_param / (n if part.sharded else 1)
        if part.on_cpu:
            cpu += size
        else:
            sums[part.component] += size
    frozen = _frozen_bytes(s) if s.frozen_params else 0.0
    frozen_share = frozen / (n if s.sharding.shards_weights else 1)
    if s.offload is Offload.PARAMS:
        cpu += frozen_share
    else:
        sums["weights"] += frozen_share
    gather = 0.0
    if s.sharding.shards_weights:
        # The gathered layer and the next one prefetched, 16-bit (DeepSpeed: 4 x largest_layer_params).
        gather = 2 * (4 if s.precision is Precision.FP32 else 2) * s.shape.largest_layer_params
    overhead = CONTEXT_BYTES + (NCCL_BYTES if n > 1 else 0.0)
    return MemoryEstimate(n, sums["weights"], sums["gradients"], sums["optimizer"], gather,
                          activation_bytes(s), overhead, cpu)
