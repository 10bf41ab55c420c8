"""The commands of the contract, end to end through the CLI."""

import json
from dataclasses import dataclass

import pandas as pd
import pytest
from click.testing import CliRunner

from nsanalyze.cli import cli
from tests.conftest import DEV_SUITE_NCU, DEV_SUITE_NSYS, PUBLIC


def invoke(*args):
    """The command run by click's test runner in a process of its own (ncu_report keeps what it reads until the
    process ends): its exit code and output."""
    from tests.isolated import apart

    return apart(_invoke_here, [str(a) for a in args])


@dataclass
class Invoked:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def _invoke_here(args) -> Invoked:
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    return Invoked(result.exit_code, result.stdout, result.stderr)


def test_report_json_contract():
    result = invoke("report", DEV_SUITE_NCU, DEV_SUITE_NSYS, "-o", "-")
    model = json.loads(result.stdout)
    assert model["schema"] == "nsanalyze/report@1"
    assert {"schema", "version", "profiles", "kernels", "findings", "timeline"} <= set(model)
    assert [p["kind"] for p in model["profiles"]] == ["ncu", "nsys"]
    assert model["profiles"][0]["compute_capability"] == "9.0"
    kernel = model["kernels"][0]
    assert {"id", "name", "demangled", "duration_ns", "launches", "time_share", "metrics", "bound", "roofline"} <= set(kernel)
    assert {"arithmetic_intensity", "achieved_flops_per_s", "peak_flops_per_s", "peak_bytes_per_s"} <= set(kernel["roofline"])
    finding = model["findings"][0]
    assert {"check", "severity", "kernel_name", "title", "evidence", "estimated_speedup", "estimated_savings_ns",
            "rank", "advice", "source", "device_id"} <= set(finding)
    assert {"span_ns", "gpu_busy_ns", "gpu_idle_ns", "kernel_ns", "memcpy_ns", "devices"} <= set(model["timeline"])
    # joined: ncu findings weighted by the nsys time of the same kernel
    sgemm = next(k for k in model["kernels"] if k["name"] == "sgemm_tiled")
    assert sgemm["nsys"]["total_ns"] == 1858426


def test_fail_on_gate():
    assert invoke("report", DEV_SUITE_NCU, "--fail-on", "high").exit_code == 1
    assert invoke("report", DEV_SUITE_NCU, "--fail-on", "high", "--set", "missing-tensor-cores.min_fp_roof_share=2",
                  "--set", "atomic-contention.min_atomic_share=2").exit_code == 1   # other highs remain


def test_fail_on_names_what_tripped_it():
    """CI says why: one stderr line per finding at the gate's severity or worse (check, severity, where,
    savings), none below it."""
    from tests.conftest import DEV_INFER_NSYS

    result = CliRunner().invoke(cli, ["report", str(DEV_INFER_NSYS), "--fail-on", "medium", "-o", "-"])
    assert result.exit_code == 1
    model = json.loads(result.stdout)
    lines = [line for line in result.stderr.splitlines() if line.startswith("nsanalyze: --fail-on medium: ")]
    tripped = [f for f in model["findings"] if f["severity"] in ("high", "medium")]
    assert len(lines) == len(tripped) >= 1
    host = next(f for f in tripped if f["check"] == "host-compute")
    assert host["severity"] == "high" and round(host["estimated_savings_ns"] / 1e6) == 58
    assert lines[1] == ("nsanalyze: --fail-on medium: host-compute (high): steady window 6.426-6.736 s in "
                        f"{DEV_INFER_NSYS}: saves 57.9 ms (19% of the window)")
    kernel = invoke("report", DEV_SUITE_NCU, "--fail-on", "high", "-o", "-")
    assert "nsanalyze: --fail-on high: missing-tensor-cores (high): kernel sgemm_tiled in " in kernel.stderr
    # without the two findings at high (launch-overhead 20%, host-compute 19% of the window) the gate passes
    passed = CliRunner().invoke(cli, ["report", str(DEV_INFER_NSYS), "--fail-on", "high", "--skip", "host-compute",
                                      "--skip", "launch-overhead", "-o", "-"])
    assert passed.exit_code == 0 and "--fail-on" not in passed.stderr


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".json"])
def test_metrics_formats(tmp_path, suffix):
    target = tmp_path / f"m{suffix}"
    assert invoke("metrics", DEV_SUITE_NCU, "-o", target).exit_code == 0
    frame = {".csv": pd.read_csv, ".parquet": pd.read_parquet, ".json": pd.read_json}[suffix](target)
    assert len(frame) == 12 and frame.loc[0, "duration_ns"] == 260928


def test_metrics_on_nsys_and_empty_export(tmp_path):
    assert invoke("metrics", DEV_SUITE_NSYS, "-o", tmp_path / "k.csv").exit_code == 0
    assert len(pd.read_csv(tmp_path / "k.csv")) == 13
    assert invoke("metrics", PUBLIC / "quasiben__nvtx-examples__quickstart.sqlite.xz").exit_code == 0


def test_checks_documents_every_check():
    out = invoke("checks").stdout
    for check_id in ("uncoalesced-global", "bank-conflicts", "missing-tensor-cores", "warp-divergence", "low-ilp",
                     "low-occupancy", "local-memory-spill", "atomic-contention", "tail-effect", "clock-throttling",
                     "gpu-idle", "pageable-memcpy", "sync-memcpy", "host-sync", "launch-overhead", "low-tensor-activity"):
        assert check_id in out
    markdown = invoke("checks", "--markdown").stdout
    assert markdown.count("### What it detects") >= 16


def test_unrelated_inputs_are_not_merged_as_ranks(tmp_path, capsys):
    """Two unrelated programs' traces (recorded hours apart, no distributedInfo) and two unrelated exports:
    exit 2 with one line naming the files and why; --as-ranks merges them as asked; real per-rank exports
    (captured at the same time) still merge."""
    import shutil

    from nsanalyze.cli import main
    from tests.conftest import REAL

    def run(*args) -> int:
        try:
            main([str(a) for a in args])
        except SystemExit as exc:
            return exc.code
        return 0

    gpt, mlp = REAL / "gpt_fp32_kineto.json.gz", REAL / "mlp_eager_kineto.json.gz"
    for inputs in ([gpt, mlp], [REAL / "gpt_fp32_nsys.sqlite.xz", REAL / "nightly1_nsys.sqlite.xz"]):
        assert run("report", *inputs) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"nsanalyze: {inputs[0]}, {inputs[1]}: not ranks of one run: ")
        assert "(ranks of one run are captured at the same time)" in err and "--as-ranks" in err
    (tmp_path / "kineto").mkdir()
    for trace in (gpt, mlp):
        shutil.copy(trace, tmp_path / "kineto")
    assert run("report", tmp_path / "kineto") == 2
    capsys.readouterr()
    assert run("report", tmp_path / "kineto", "--as-ranks", "-o", "-") == 0
    assert len(json.loads(capsys.readouterr().out)["timeline"]["merged"]["ranks"]) == 2
    assert run("report", REAL / "ddp_gpu_rank0_nsys.sqlite.xz", REAL / "ddp_gpu_rank1_nsys.sqlite.xz", "-o", "-") == 0
    assert len(json.loads(capsys.readouterr().out)["timeline"]["merged"]["ranks"]) == 2
    rank0 = REAL / "ddp_gpu_rank0_nsys.sqlite.xz"   # one file twice is one run, not two ranks
    assert run("report", rank0, REAL / ".." / "real" / rank0.name) == 2
    assert "is given twice" in capsys.readouterr().err
    (tmp_path / "copies").mkdir()   # ... nor is one file under two names (a byte-identical copy)
    copies = [shutil.copy(gpt, tmp_path / "copies" / name) for name in ("a_kineto.json.gz", "b_kineto.json.gz")]
    assert run("report", *copies) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "are the same file: one profile, not two ranks" in err


def test_ncu_reports_of_two_gpus_say_so():
    """An A100 report and a V100 report in one report: the header names both GPUs, each kernel its own."""
    a100 = PUBLIC / "bwcurless__FaSTED__profiles__After_Fixed_Alignment__Pipeline_Depth_1.ncu-rep.xz"
    v100 = PUBLIC / "NCAR__GPU_workshop__10_HandsOnNsight__ncu__MW_Baseline.ncu-rep.xz"
    model = json.loads(invoke("report", a100, v100, "-o", "-").stdout)
    assert model["gpus"] == ["NVIDIA A100-PCIE-40GB", "Tesla V100-SXM2-32GB"]
    assert {k["gpu"] for k in model["kernels"] if k["profile"] == str(v100)} == {"Tesla V100-SXM2-32GB"}
    assert {k["gpu"] for k in model["kernels"] if k["profile"] == str(a100)} == {"NVIDIA A100-PCIE-40GB"}
    from nsanalyze.render.markdown import render

    text = render(model)
    assert "Kernels of 2 different GPUs \\(NVIDIA A100\\-PCIE\\-40GB, Tesla V100\\-SXM2\\-32GB\\)" in text
    assert "compute\\_tendencies\\_x\\_279\\_gpu \\(Tesla V100\\-SXM2\\-32GB\\)" in text
    single = json.loads(invoke("report", a100, "-o", "-").stdout)
    assert "gpus" not in single


def test_nvtx_range_takes_the_name_the_report_prints(capsys):
    """`--nvtx-range "step N"`, as the report names the steps: every `step <number>` instance (150 in the export,
    by SQL), the warm-up step 0 included; an exact name still wins, and an unknown one is one line, exit 2."""
    from nsanalyze.cli import main
    from tests.conftest import REAL, sql

    nightly = REAL / "nightly1_nsys.sqlite.xz"
    (count,) = sql(nightly, "SELECT COUNT(*) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
                            "WHERE n.eventType = 59 AND COALESCE(n.text, s.value) GLOB 'step [0-9]*'")[0]
    assert count == 150
    model = json.loads(invoke("report", nightly, "--nvtx-range", "step N", "-o", "-").stdout)
    assert model["timeline"]["window"]["kind"] == "nvtx-range"
    assert model["timeline"]["window"]["description"].startswith(f"NVTX range 'step N' ({count} instance(s))")
    one = json.loads(invoke("report", nightly, "--nvtx-range", "step 7", "-o", "-").stdout)
    assert one["timeline"]["window"]["description"].startswith("NVTX range 'step 7' (1 instance(s))")
    with pytest.raises(SystemExit) as exit_info:
        main(["report", str(nightly), "--nvtx-range", "nope N"])
    assert exit_info.value.code == 2 and "no NVTX range named 'nope N'" in capsys.readouterr().err
