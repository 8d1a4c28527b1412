"""Hardware specs and dtypes: every card of the reference sheet, aliases, uncertainty marks, unknown names."""

from __future__ import annotations

import csv
import io

import pytest

from llm_knee.catalog import CatalogError, get_dtype, get_gpu, list_gpus
from llm_knee.catalog.hardware import GIB

# Copy of shared/data/gpu-specs.csv (the reference sheet), kept here so the test is hermetic.
SHEET = """\
gpu,memory_gb,memory_bandwidth_gb_s,bf16_dense_tflops,fp8_dense_tflops,notes
T4,16,320,,,"no BF16; FP16 65 TFLOPS (tensor)"
L4,24,300,121,242,
A10,24,600,125,,
A100-40G-SXM,40,1555,312,,
A100-80G-SXM,80,2039,312,,
H100-SXM,80,3350,989,1979,
H100-PCIe,80,2000,756,1513,
H200,141,4800,989,1979,
B200,180,8000,2250,4500,"early specs 192 GB; TFLOPS partly unverified"
L40S,48,864,362,733,
RTX-4090,24,1008,165,330,"BF16 figure with FP32 accumulate unverified"
MI300X,192,5300,1307,2615,
Ascend-910B,64,1600?,280?,,"sources conflict on bandwidth and TFLOPS by SKU"
Jetson-AGX-Orin-64GB,64,204.8,42?,,"memory shared with CPU; GPU TFLOPS derived, unverified"
"""


def test_every_card_of_the_reference_sheet_is_in_the_catalog_with_its_figures() -> None:
    for row in csv.DictReader(io.StringIO(SHEET)):
        gpu = get_gpu(row["gpu"])
        assert gpu.memory_bytes == int(float(row["memory_gb"]) * GIB)
        bw = row["memory_bandwidth_gb_s"]
        assert gpu.bandwidth_bytes_s == pytest.approx(float(bw.rstrip("?")) * 1e9)
        if bw.endswith("?"):
            assert "bandwidth_bytes_s" in gpu.uncertain
        bf16 = row["bf16_dense_tflops"]
        if bf16:
            assert gpu.bf16_flops == pytest.approx(float(bf16.rstrip("?")) * 1e12)
            if bf16.endswith("?"):
                assert "bf16_flops" in gpu.uncertain
        else:
            assert gpu.bf16_flops is None
        fp8 = row["fp8_dense_tflops"]
        assert (gpu.fp8_flops is None) == (fp8 == "")
        if "unverified" in row["notes"] or "conflict" in row["notes"]:
            assert gpu.uncertain


EXPECTED_POWER = {
    "H100-SXM": 700,
    "H200": 700,
    "A100-80G-SXM": 400,
    "L40S": 350,
    "L4": 72,
    "RTX-4090": 450,
    "T4": 70,
    "A10": 150,
    "B200": 1000,
    "MI300X": 750,
    "Jetson-AGX-Orin-64GB": 60,
}


@pytest.mark.parametrize(("name", "watts"), sorted(EXPECTED_POWER.items()))
def test_power_limits(name: str, watts: float) -> None:
    assert get_gpu(name).power_limit_w == watts


def test_uncertain_figures_are_marked() -> None:
    assert {"bf16_flops", "fp8_flops"} <= get_gpu("rtx-4090").uncertain
    assert "power_limit_w" in get_gpu("b200").uncertain
    assert "memory_bytes" in get_gpu("b200").uncertain
    assert "bf16_flops" in get_gpu("jetson-agx-orin-64gb").uncertain
    assert get_gpu("h100").uncertain == frozenset()
    for name in list_gpus():
        assert get_gpu(name).source


@pytest.mark.parametrize(
    ("alias", "name"),
    [
        ("h100", "H100-SXM"),
        ("H100-SXM", "H100-SXM"),
        ("h100_sxm", "H100-SXM"),
        ("a100-80g", "A100-80G-SXM"),
        ("rtx-4090", "RTX-4090"),
        ("l40s", "L40S"),
        ("jetson-agx-orin-64gb", "Jetson-AGX-Orin-64GB"),
        ("H200", "H200"),
    ],
)
def test_gpu_aliases(alias: str, name: str) -> None:
    assert get_gpu(alias).name == name


def test_jetson_has_unified_memory_and_datacenter_cards_do_not() -> None:
    assert get_gpu("jetson-agx-orin-64gb").unified_memory
    assert not get_gpu("h100").unified_memory


def test_t4_runs_16_bit_at_its_fp16_peak() -> None:
    t4 = get_gpu("t4")
    assert t4.bf16_flops is None
    assert t4.flops_16bit == 65e12
    assert t4.peak_flops("fp8") == 65e12  # no FP8 tensor cores


def test_unknown_gpu_suggests_close_names() -> None:
    with pytest.raises(CatalogError, match="H100-SXM") as info:
        get_gpu("h10")
    assert "'h10'" in str(info.value)


@pytest.mark.parametrize(
    ("name", "bytes_per_param"),
    [
        ("bf16", 2),
        ("fp16", 2),
        ("FP8", 1),
        ("int8", 1),
        ("int4", 4.125 / 8),
        ("Q4_K_M", 4.89 / 8),
        ("q8_0", 8.5 / 8),
    ],
)
def test_dtype_bytes(name: str, bytes_per_param: float) -> None:
    assert get_dtype(name).bytes_per_param == pytest.approx(bytes_per_param)


def test_dtype_notes_state_their_figures() -> None:
    assert "4.125" in get_dtype("int4").note
    assert "4.89" in get_dtype("q4_k_m").note


def test_unknown_dtype_suggests_close_names() -> None:
    with pytest.raises(CatalogError, match="bf16"):
        get_dtype("bf61")
