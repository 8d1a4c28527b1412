"""Accelerator specs: memory, bandwidth, dense tensor-core peaks, power limit, each with its source.

Conventions (stated once, used everywhere):
- memory_bytes: the vendor's "GB" figure for GPU memory is read as GiB (an "80 GB" H100 carries 5 x 16 GiB
  HBM3 stacks). The driver exposes slightly less (e.g. 79.6 GiB on an H100 SXM); the runtime reserve of the
  planner/simulator absorbs the difference.
- bandwidth_bytes_s: vendor GB/s x 1e9 (decimal, as spec sheets mean it).
- *_flops: dense (no 2:4 sparsity) tensor-core peaks in FLOP/s, from /shared/data/gpu-specs.csv.
- interconnect_bytes_s: GPU-to-GPU bandwidth per direction used by tensor-parallel all-reduce
  (NVLink/Infinity Fabric where the form factor has it, else PCIe); None where multi-GPU makes no sense.
- uncertain: names of the fields whose figures sources disagree on or that we derived; treat with care.
"""

from __future__ import annotations

from dataclasses import dataclass

from llm_knee.catalog.errors import normalize_name, resolve_name, unknown_item_error

GIB = 1024**3
_CSV = "shared/data/gpu-specs.csv (vendor spec sheets, dense figures)"


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_bytes: int
    bandwidth_bytes_s: float
    bf16_flops: float | None
    fp8_flops: float | None
    power_limit_w: float | None
    unified_memory: bool
    source: str
    uncertain: frozenset[str]
    fp16_flops: float | None = None
    interconnect_bytes_s: float | None = None

    @property
    def flops_16bit(self) -> float:
        """Dense 16-bit tensor peak: BF16 where the card has it, else FP16 (T4 has no BF16 tensor cores)."""
        peak = self.bf16_flops if self.bf16_flops is not None else self.fp16_flops
        if peak is None:
            raise ValueError(f"{self.name} has no 16-bit tensor peak in the catalog")
        return peak

    def peak_flops(self, compute_class: str) -> float:
        """Peak for a dtype's compute class: FP8 tensor cores when asked and present, else 16-bit."""
        if compute_class == "fp8" and self.fp8_flops is not None:
            return self.fp8_flops
        return self.flops_16bit


def _gpu(
    name: str,
    mem_gib: float,
    bw_gb_s: float,
    bf16_tflops: float | None,
    fp8_tflops: float | None,
    power_w: float | None,
    *,
    uncertain: tuple[str, ...] = (),
    note: str = "",
    unified: bool = False,
    fp16_tflops: float | None = None,
    link_gb_s: float | None = None,
) -> GpuSpec:
    source = _CSV + (f"; {note}" if note else "")
    # Every card here runs FP16 at its BF16 rate; only cards without BF16 (T4) state FP16 separately.
    fp16 = fp16_tflops if fp16_tflops is not None else bf16_tflops
    return GpuSpec(
        name=name,
        memory_bytes=int(mem_gib * GIB),
        bandwidth_bytes_s=bw_gb_s * 1e9,
        bf16_flops=None if bf16_tflops is None else bf16_tflops * 1e12,
        fp8_flops=None if fp8_tflops is None else fp8_tflops * 1e12,
        power_limit_w=power_w,
        unified_memory=unified,
        source=source,
        uncertain=frozenset(uncertain),
        fp16_flops=None if fp16 is None else fp16 * 1e12,
        interconnect_bytes_s=None if link_gb_s is None else link_gb_s * 1e9,
    )


# Links per direction: NVLink4 (H100/H200 SXM) 450 GB/s, NVLink3 (A100 SXM) 300 GB/s, NVLink5 (B200)
# 900 GB/s, MI300X Infinity Fabric 7 x 64 GB/s = 448 GB/s, PCIe Gen5 x16 64 GB/s, Gen4 x16 32 GB/s,
# Gen3 x16 16 GB/s. All from vendor product pages; PCIe figures are theoretical (marked uncertain).
_GPUS: tuple[GpuSpec, ...] = (
    _gpu(
        "T4",
        16,
        320,
        None,
        None,
        70,
        fp16_tflops=65,
        link_gb_s=16,
        uncertain=("interconnect_bytes_s",),
        note="no BF16; FP16 65 TFLOPS (tensor); no FP8; PCIe Gen3",
    ),
    _gpu("L4", 24, 300, 121, 242, 72, link_gb_s=32, uncertain=("interconnect_bytes_s",), note="PCIe Gen4"),
    _gpu(
        "A10",
        24,
        600,
        125,
        None,
        150,
        link_gb_s=32,
        uncertain=("interconnect_bytes_s",),
        note="no FP8; PCIe Gen4",
    ),
    _gpu("A100-40G-SXM", 40, 1555, 312, None, 400, link_gb_s=300, note="no FP8; NVLink3"),
    _gpu("A100-80G-SXM", 80, 2039, 312, None, 400, link_gb_s=300, note="no FP8; NVLink3"),
    _gpu("H100-SXM", 80, 3350, 989, 1979, 700, link_gb_s=450, note="NVLink4"),
    _gpu(
        "H100-PCIe",
        80,
        2000,
        756,
        1513,
        350,
        link_gb_s=64,
        uncertain=("power_limit_w", "interconnect_bytes_s"),
        note="power 300-350 W configurable; PCIe Gen5 without NVLink bridge",
    ),
    _gpu("H200", 141, 4800, 989, 1979, 700, link_gb_s=450, note="H200 SXM; the NVL card is 600 W; NVLink4"),
    _gpu(
        "B200",
        180,
        8000,
        2250,
        4500,
        1000,
        link_gb_s=900,
        uncertain=("memory_bytes", "bf16_flops", "fp8_flops", "power_limit_w"),
        note="early specs 192 GB; TFLOPS partly unverified; 1000 W HGX figure (some systems 1200 W); NVLink5",
    ),
    _gpu("L40S", 48, 864, 362, 733, 350, link_gb_s=32, uncertain=("interconnect_bytes_s",), note="PCIe Gen4"),
    _gpu(
        "RTX-4090",
        24,
        1008,
        165,
        330,
        450,
        link_gb_s=32,
        uncertain=("bf16_flops", "fp8_flops", "interconnect_bytes_s"),
        note="BF16/FP8 figures with FP16 accumulate; GeForce halves the rate with FP32 accumulate; PCIe Gen4",
    ),
    _gpu("MI300X", 192, 5300, 1307, 2615, 750, link_gb_s=448, note="Infinity Fabric 7 x 64 GB/s"),
    _gpu(
        "Ascend-910B",
        64,
        1600,
        280,
        None,
        None,
        link_gb_s=None,
        uncertain=("bandwidth_bytes_s", "bf16_flops"),
        note="sources conflict on bandwidth and TFLOPS by SKU; power limit unknown",
    ),
    _gpu(
        "Jetson-AGX-Orin-64GB",
        64,
        204.8,
        42,
        None,
        60,
        unified=True,
        uncertain=("bf16_flops", "power_limit_w"),
        note="LPDDR5 shared with CPU and OS; GPU TFLOPS derived, unverified; 60 W is the MAXN power mode",
    ),
)

_ALIASES: dict[str, str] = {
    "h100": "H100-SXM",
    "h100sxm5": "H100-SXM",
    "h10080g": "H100-SXM",
    "h100pcie80g": "H100-PCIe",
    "h200sxm": "H200",
    "h200141g": "H200",
    "a100": "A100-80G-SXM",
    "a10080g": "A100-80G-SXM",
    "a10080gb": "A100-80G-SXM",
    "a100sxm": "A100-80G-SXM",
    "a100sxm80g": "A100-80G-SXM",
    "a10040g": "A100-40G-SXM",
    "a10040gb": "A100-40G-SXM",
    "a100sxm40g": "A100-40G-SXM",
    "4090": "RTX-4090",
    "geforcertx4090": "RTX-4090",
    "mi300": "MI300X",
    "910b": "Ascend-910B",
    "orin": "Jetson-AGX-Orin-64GB",
    "jetsonorin": "Jetson-AGX-Orin-64GB",
    "agxorin": "Jetson-AGX-Orin-64GB",
    "jetsonagxorin": "Jetson-AGX-Orin-64GB",
    "b200sxm": "B200",
    "teslat4": "T4",
}


def list_gpus() -> list[str]:
    return [g.name for g in _GPUS]


def get_gpu(name: str) -> GpuSpec:
    """Look up a card by name or alias, ignoring case and separators ("h100", "H100-SXM", "a100-80g")."""
    found = resolve_name(normalize_name(name), {normalize_name(g.name): g for g in _GPUS}, _ALIASES)
    if found is None:
        raise unknown_item_error("GPU", name, list_gpus())
    return found
