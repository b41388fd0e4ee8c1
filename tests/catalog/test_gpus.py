"""GPU catalog: data sanity, provider-name normalisation (real SkyPilot files + Vast/RunPod spellings), CLI."""

from __future__ import annotations

import csv
import json

import pytest

from cheaptune.catalog.gpus import list_gpus, normalize_gpu_name, resolve_gpu
from cheaptune.errors import BadInput

REQUIRED = ["RTX3090", "RTX4090", "RTX5090", "RTXA4000", "RTXA5000", "RTXA6000", "RTX6000-Ada", "A10", "A10G",
            "A40", "L4", "L40", "L40S", "T4", "V100", "V100-32GB", "A100", "A100-80GB", "H100-PCIE", "H100",
            "H100-NVL", "H200", "B200", "MI300X"]

# Every AcceleratorName in ../shared/data/skypilot-catalog and what it must become (None: not in our list).
SKYPILOT_EXPECTED = {
    "A10": "A10", "A100": "A100", "A100-80GB": "A100-80GB", "A100-80GB-SXM": "A100-80GB", "A10G": "A10G",
    "A40": "A40", "A4000": "RTXA4000", "A6000": "RTXA6000", "A800": None, "B200": "B200", "B300": "B300",
    "GH200": "GH200", "H100": "H100", "H100-MEGA": "H100", "H100-SXM": "H100", "H200": "H200", "L4": "L4",
    "L40": "L40", "L40S": "L40S", "M4000": None, "P4000": None, "RTX3060": None, "RTX3070": None,
    "RTX3080": None, "RTX3090": "RTX3090", "RTX4060": None, "RTX4070": None, "RTX4090": "RTX4090",
    "RTX5090": "RTX5090", "RTX6000": "RTX6000", "RTX6000-Ada": "RTX6000-Ada", "RTXA2000": None,
    "RTXA4000": "RTXA4000", "RTXA5000": "RTXA5000", "RTXA6000": "RTXA6000", "RTXPRO4500-SE": None,
    "RTXPRO6000S": None, "T4": "T4", "V100": "V100", "V100-32GB": "V100-32GB", "tpu-v6e-1": None,
}

# Spellings seen on Vast.ai offers, RunPod's GPU type ids, nvidia-smi and cloud consoles.
PROVIDER_SPELLINGS = {
    "RTX_4090": "RTX4090", "RTX 4090": "RTX4090", "NVIDIA GeForce RTX 4090": "RTX4090", "rtx-4090": "RTX4090",
    "NVIDIA GeForce RTX 3090": "RTX3090", "RTX 5090": "RTX5090", "NVIDIA RTX A6000": "RTXA6000",
    "RTX A5000": "RTXA5000", "NVIDIA RTX A4000": "RTXA4000", "NVIDIA RTX 6000 Ada Generation": "RTX6000-Ada",
    "RTX 6000Ada": "RTX6000-Ada", "Q RTX 6000": "RTX6000", "Quadro RTX 6000": "RTX6000",
    "NVIDIA A100 80GB PCIe": "A100-80GB", "NVIDIA A100-SXM4-80GB": "A100-80GB", "A100 SXM4": "A100",
    "NVIDIA A100-SXM4-40GB": "A100", "A100-PCIE-40GB": "A100", "NVIDIA H100 80GB HBM3": "H100",
    "NVIDIA H100 PCIe": "H100-PCIE", "H100 SXM": "H100", "H100 NVL": "H100-NVL", "NVIDIA H200": "H200",
    "NVIDIA L40S": "L40S", "NVIDIA L4": "L4", "Tesla T4": "T4", "Tesla V100-SXM2-16GB": "V100",
    "Tesla V100-SXM2-32GB": "V100-32GB", "NVIDIA A40": "A40", "NVIDIA A10G": "A10G", "NVIDIA B200": "B200",
    "AMD Instinct MI300X": "MI300X", "mi300x": "MI300X", "a100_80gb": "A100-80GB",
    "A6000 PCIe": "RTXA6000", "H100-MEGA SXM": "H100", "A4000 pcie": "RTXA4000", "RTX 4080": None, "GeForce GTX 1080 Ti": None, "": None, "   ": None,
}


def test_catalog_has_every_required_gpu_with_sane_figures():
    specs = {g.name: g for g in list_gpus()}
    assert set(REQUIRED) <= set(specs)
    for g in specs.values():
        assert g.fp16_tflops > g.fp32_tflops, g.name  # tensor peak above the vector peak
        assert (g.bf16_tflops is not None) == g.bf16, g.name
        assert g.memory_bytes == int(g.memory_gib * 1024**3)
        assert g.source.startswith("https://") and g.source_date and g.read and g.checked
    # bitsandbytes 0.50 runs 4-bit on ROCm gfx942/gfx950: QLoRA is allowed on MI300X/MI325X/MI355X, and says why
    for amd in ("MI300X", "MI325X", "MI355X"):
        assert not specs[amd].cuda and specs[amd].bnb_4bit and "bitsandbytes@" in specs[amd].bnb_4bit_source, amd
    assert {"B300", "GB200", "RTXPRO6000"} <= set(specs) and specs["MI355X"].memory_gib > specs["MI325X"].memory_gib
    assert specs["T4"].peak_tflops("bf16") == specs["T4"].fp16_tflops  # no bf16: fp16 speed
    assert specs["H100"].bf16_tflops < 1000  # dense, not the 1979 sparse figure
    assert specs["H100"].interconnect == "sxm" and specs["H100-PCIE"].interconnect == "pcie"


@pytest.mark.parametrize(("raw", "expected"), sorted(PROVIDER_SPELLINGS.items()))
def test_provider_spellings(raw, expected):
    assert normalize_gpu_name(raw) == expected


@pytest.mark.parametrize(("raw", "gib", "expected"), [
    ("H100", 95830 / 1024, "H100-NVL"), ("H100", 80, "H100"), ("A100", 80, "A100-80GB"),
    ("A100", 40, "A100"), ("V100", 32, "V100-32GB"), ("RTX4090", 24, "RTX4090"),
])
def test_memory_hint_picks_the_board(raw, gib, expected):
    assert normalize_gpu_name(raw, memory_gib=gib) == expected


def _skypilot_rows(shared_data):
    files = sorted((shared_data / "skypilot-catalog").rglob("*.csv"))
    assert files, "no SkyPilot CSVs under shared data"
    for f in files:
        with f.open(newline="") as fh:
            for row in csv.DictReader(fh):
                if row.get("AcceleratorName"):
                    yield f, row


def test_every_skypilot_accelerator_name(shared_data):
    names = {row["AcceleratorName"] for _, row in _skypilot_rows(shared_data)}
    unexpected = names - set(SKYPILOT_EXPECTED)
    assert not unexpected, f"new AcceleratorNames in the SkyPilot files; add them to SKYPILOT_EXPECTED: {unexpected}"
    for name in names:
        assert normalize_gpu_name(name) == SKYPILOT_EXPECTED[name], name


def test_skypilot_gpuinfo_memory_matches_spec(shared_data):
    """Where a row carries per-GPU memory, the board we map it to (with that hint) has about that memory.

    Known exception: Vast lists a Hong Kong RTX 4090 with 48 GB (a memory-modded card); our spec keeps
    the stock 24 GB, which errs on the safe side for fitting.
    """
    checked, odd = 0, set()
    for f, row in _skypilot_rows(shared_data):
        info = row.get("GpuInfo", "")
        if "SizeInMiB" not in info:
            continue
        mib = float(info.split("'SizeInMiB':")[1].split("}")[0])
        count = float(row["AcceleratorCount"] or 1)
        per_gpu_gib = mib / 1024 / (count if "/vast/" in f.as_posix() else 1)  # Vast gives the total
        if per_gpu_gib < 4:  # RunPod writes GB as if MiB
            continue
        canonical = normalize_gpu_name(row["AcceleratorName"], memory_gib=per_gpu_gib)
        if canonical is None:
            continue
        spec = resolve_gpu(canonical)
        if abs(spec.memory_gib - per_gpu_gib) / spec.memory_gib > 0.08:
            odd.add((row["AcceleratorName"], round(per_gpu_gib)))
        checked += 1
    assert checked > 50
    assert odd <= {("RTX4090", 48)}, odd


def test_resolve_gpu_unknown_suggests():
    assert resolve_gpu("nvidia geforce rtx 4090").name == "RTX4090"
    with pytest.raises(BadInput, match=r"unknown GPU 'RTX 4080'.*did you mean.*RTX4090"):
        resolve_gpu("RTX 4080")


def _write(tmp_path, body: str):
    p = tmp_path / "gpus.yaml"
    p.write_text(body)
    return p


GOOD_ROW = """  - name: X1
    vendor: nvidia
    memory_gib: 24
    arch: ada
    compute_capability: "8.9"
    bf16: true
    bf16_tflops: 100
    fp16_tflops: 100
    fp32_tflops: 50
    mem_bw_gbs: 1000
    tier: consumer
    interconnect: pcie
    source: https://example.com/x1
    source_date: undated
    read: "2026-01-01"
    checked: recalled
"""


def test_custom_file_loads(tmp_path):
    p = _write(tmp_path, "gpus:\n" + GOOD_ROW)
    assert [g.name for g in list_gpus(p)] == ["X1"]
    assert normalize_gpu_name("NVIDIA X1", path=p) == "X1"


@pytest.mark.parametrize(("edit", "message"), [
    (("tier: consumer", "tier: gaming"), r"entry 'X1': field 'tier'"),
    (("memory_gib: 24", "memory_gib: lots"), r"entry 'X1': field 'memory_gib'"),
    (("    checked: recalled\n", ""), r"entry 'X1': field 'checked': Field required"),
    (("source: https://example.com/x1", "source: a datasheet"), r"field 'source'"),
    (("source_date: undated", "source_date: last year"), r"field 'source_date'"),
])
def test_bad_row_is_one_line_with_file_entry_field(tmp_path, edit, message):
    p = _write(tmp_path, "gpus:\n" + GOOD_ROW.replace(*edit))
    with pytest.raises(BadInput, match=message) as err:
        list_gpus(p)
    assert str(p) in str(err.value) and "\n" not in str(err.value)


def test_bad_files(tmp_path):
    with pytest.raises(BadInput, match="not valid YAML"):
        list_gpus(_write(tmp_path, "gpus: [\n"))
    with pytest.raises(BadInput, match="top-level 'gpus:' list"):
        list_gpus(_write(tmp_path, "gpu: []\n"))
    with pytest.raises(BadInput, match="repeated: X1"):
        list_gpus(_write(tmp_path, "gpus:\n" + GOOD_ROW + GOOD_ROW))


def test_cli_table_and_json(run_cli):
    code, out, _ = run_cli("gpus")
    assert code == 0 and "RTX4090" in out and "MI300X" in out
    code, out, _ = run_cli("gpus", "--json", "--tier", "consumer")
    rows = json.loads(out)
    assert code == 0 and {r["name"] for r in rows} == {"RTX3090", "RTX4090", "RTX5090"}
    assert rows[0]["memory_bytes"] > 0
    code, _, err = run_cli("gpus", "--tier", "gaming")
    assert code == 2 and "--tier" in err
