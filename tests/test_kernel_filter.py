"""-k/--kernel NAME|regex:PATTERN on report, metrics and diff, for ncu reports and nsys exports."""

import csv
import io
import json

import pytest

from nsanalyze.cli import main
from tests.conftest import DEV_SUITE_NCU, DEV_SUITE_NSYS, DEV_SUITE_V2_NCU, FIXTURES

NIGHTLY = FIXTURES / "real" / "nightly1_nsys.sqlite.xz"


def run(args) -> int:
    """main(args) in a process of its own (ncu_report keeps what it reads until the process ends), its output
    written here, where the tests read it."""
    import sys

    from tests.isolated import apart

    code, out, err = apart(_run_here, list(args))
    sys.stdout.write(out)
    sys.stderr.write(err)
    return code


def _run_here(args) -> tuple[int, str, str]:
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(args)
            code = 0
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def report(tmp_path, *args) -> dict:
    target = tmp_path / "r.json"
    assert run(["report", *args, "-o", str(target)]) == 0
    return json.loads(target.read_text())


def test_ncu_by_function_name(tmp_path):
    model = report(tmp_path, str(DEV_SUITE_NCU), "-k", "sgemm_tiled")
    assert [k["name"] for k in model["kernels"]] == ["sgemm_tiled"]
    assert {f["check"] for f in model["findings"]} == {"missing-tensor-cores"}
    assert all(n["kernel_name"] == "sgemm_tiled" for n in model["not_judged"])


def test_ncu_by_regex_and_by_demangled_signature(tmp_path):
    model = report(tmp_path, str(DEV_SUITE_NCU), "--kernel", "regex:^reduce_")
    assert sorted(k["name"] for k in model["kernels"]) == ["reduce_interleaved", "reduce_sequential"]
    model = report(tmp_path, str(DEV_SUITE_NCU), "-k", "reduce_sequential(const float *, float *, unsigned long)")
    assert [k["name"] for k in model["kernels"]] == ["reduce_sequential"]


def test_nsys_judges_only_the_matching_kernels_and_keeps_the_others_as_gpu_work(tmp_path):
    """-k on an export narrows what is judged, not what ran: the kernels filtered out stay GPU work in the
    budget (no idle time, so no idle cause is invented) and one part of the role split."""
    from tests.conftest import sql

    model = report(tmp_path, str(DEV_SUITE_NSYS), "-k", "regex:sgemm")
    assert [k["name"] for k in model["kernels"]] == ["sgemm_tiled"]
    assert model["kernels"][0]["duration_ns"] == 1858426  # nsys stats: sgemm_tiled's total (fixtures/oracle)
    (all_ns,) = sql(DEV_SUITE_NSYS, "SELECT SUM(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0]
    assert model["timeline"]["kernel_ns"] == all_ns   # the whole capture: every kernel still counts
    assert model["timeline"]["kernel_filter"]["filtered_out_ns"] == all_ns - 1858426
    whole = report(tmp_path, str(DEV_SUITE_NSYS))
    assert model["timeline"]["budget"] == whole["timeline"]["budget"]

    model = report(tmp_path, str(NIGHTLY), "-k", "regex:^nvjet_")
    whole = report(tmp_path, str(NIGHTLY))
    (gemm,) = model["kernels"]
    assert gemm["name"] == "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
    assert model["timeline"]["steps"]["count"] == 149  # the steps are still found: they are NVTX ranges
    assert gemm["launches"] == 2980 and gemm["duration_ns"] == 572372335
    # a GPU-bound loop stays GPU-bound: the same budget and steps, no launch or idle cause read off the filter
    assert model["timeline"]["budget"] == whole["timeline"]["budget"]
    assert model["timeline"]["steps"]["median_ns"] == whole["timeline"]["steps"]["median_ns"]
    idle_checks = {"launch-overhead", "gpu-idle", "host-compute", "host-sync"}
    assert not idle_checks & {f["check"] for f in model["findings"]}
    filtered = next(w for w in model["timeline"]["work"] if w["role"] == "filtered_out")
    assert filtered["ns"] == model["timeline"]["kernel_ns"] - 572372335
    assert any(note.startswith("-k regex:^nvjet_: 1 kernel judged; 4 other kernels") for note in model["timeline"]["notes"])


def test_metrics_and_diff(tmp_path, capsys):
    assert run(["metrics", str(DEV_SUITE_NCU), "-k", "regex:reduce"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert sorted(r["name"] for r in rows) == ["reduce_interleaved", "reduce_sequential"]
    assert run(["metrics", str(DEV_SUITE_NSYS), "-k", "regex:reduce"]) == 0
    rows = {r["name"]: r for r in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    assert sorted(rows) == ["reduce_interleaved", "reduce_sequential"]
    assert float(rows["reduce_interleaved"]["duration_ns"]) == 138048  # nsys stats' figure (fixtures/oracle)
    target = tmp_path / "d.json"
    assert run(["diff", str(DEV_SUITE_NCU), str(DEV_SUITE_V2_NCU), "-k", "regex:reduce", "-o", str(target)]) == 0
    assert sorted(k["name"] for k in json.loads(target.read_text())["kernels"]) == ["reduce_interleaved",
                                                                                   "reduce_sequential"]


@pytest.mark.parametrize("profile,spec,expected", [
    (DEV_SUITE_NCU, "nope", "dev_suite_full.ncu-rep.xz: no kernel matches -k nope (kernels: aos_update,"),
    (DEV_SUITE_NSYS, "regex:^cublas", "dev_suite_nsys.sqlite.xz: no kernel matches -k regex:^cublas (kernels: "),
    (DEV_SUITE_NCU, "regex:(", "--kernel: 'regex:(' is not a regular expression"),
])
def test_no_match_is_one_line_exit_2(capsys, profile, spec, expected):
    assert run(["report", str(profile), "-k", spec]) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1
