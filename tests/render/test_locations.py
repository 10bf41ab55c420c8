"""SARIF and GitHub annotations place findings on files of the checkout: paths relative to the working
directory by their longest common suffix, CUDA headers attributed to the user's calling line,
--path-map for a build prefix."""

import json
import shutil

import pytest

from nsanalyze.cli import main
from nsanalyze.render.locations import Locator, is_system
from nsanalyze.render.sarif import github_annotations, render, set_paths
from tests.conftest import DEV_SUITE_NCU, FIXTURES
from tests.isolated import main_apart

HEADER = "/usr/local/cuda/targets/x86_64-linux/include/device_atomic_functions.hpp"


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A checkout holding the dev suite's source twice: gen/dev_suite.cu matches the report's
    /work/steering/gen/dev_suite.cu by two path parts, other/dev_suite.cu by one."""
    for folder in ("gen", "other"):
        (tmp_path / folder).mkdir()
        shutil.copy(FIXTURES / "dev_suite.cu", tmp_path / folder / "dev_suite.cu")
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    set_paths(())


def results(model):
    sarif = json.loads(render(model))
    return [(r["ruleId"], r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
             r["locations"][0]["physicalLocation"]["region"]["startLine"], r["message"]["text"])
            for r in sarif["runs"][0]["results"] if "logicalLocations" not in r["locations"][0]]  # source lines


def test_relative_by_longest_suffix_and_headers_at_the_calling_line(checkout, dev_suite_model):
    located = results(dev_suite_model)
    assert {uri for _, uri, _, _ in located} == {"gen/dev_suite.cu"}
    assert ("uncoalesced-global", "gen/dev_suite.cu", 16) in {(c, u, n) for c, u, n, _ in located}
    (atomic,) = [r for r in located if r[0] == "atomic-contention"]
    # dev_suite.cu:105 is `if (i < n) atomicAdd(&bins[v[i] & 15], 1u);` inside histogram_global
    assert atomic[1:3] == ("gen/dev_suite.cu", 105)
    assert "in device_atomic_functions.hpp:112, called from this line" in atomic[3]
    assert (checkout / "gen" / "dev_suite.cu").read_text().splitlines()[104].strip().startswith("if (i < n) atomicAdd(")
    lines = github_annotations(dev_suite_model)
    placed = [line for line in lines if line.startswith("::warning file=")]   # the rest: findings no line places
    assert placed and all("file=gen/dev_suite.cu," in line for line in placed)
    assert all(line in placed or line.startswith("::warning title=") for line in lines)
    assert not any("/usr/local/cuda" in line or "/work/steering" in line for line in lines)


def test_header_left_out_when_the_kernel_is_not_found(tmp_path, monkeypatch, dev_suite_model):
    monkeypatch.chdir(tmp_path)  # no source here
    located = results(dev_suite_model)
    assert not [r for r in located if r[0] == "atomic-contention"]
    assert {uri for _, uri, _, _ in located} == {"work/steering/gen/dev_suite.cu"}  # unresolved: as given


def test_path_map_on_the_command_line(checkout):
    (checkout / "src").mkdir()
    shutil.move(checkout / "gen", checkout / "src" / "gen")
    shutil.rmtree(checkout / "other")
    # in a process of its own, from the checkout: an ncu report read here would stay in the test process's memory
    _, out, _ = main_apart(["report", DEV_SUITE_NCU, "-o", "f.sarif", "--annotations", "github", "--path-map",
                            "/work/steering/=src/"])
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
            for r in json.loads((checkout / "f.sarif").read_text())["runs"][0]["results"]
            if "logicalLocations" not in r["locations"][0]}   # the source lines (the rest: on the profile)
    assert uris == {"src/gen/dev_suite.cu"}
    assert "::warning file=src/gen/dev_suite.cu,line=16,title=uncoalesced-global::" in out


def test_bad_path_map_is_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["report", str(DEV_SUITE_NCU), "--path-map", "no-equals-sign"])
    assert exit_info.value.code == 2 and "--path-map: 'no-equals-sign': expected OLD=NEW" in capsys.readouterr().err


def test_system_headers():
    assert is_system(HEADER) and is_system("/usr/include/c++/12/bits/stl_algo.h")
    assert is_system("/opt/nvidia/hpc_sdk/Linux_x86_64/24.1/cuda/12.3/include/cuda_fp16.hpp")
    assert not is_system("/home/me/project/kernels/gemm.cu") and not is_system("src/cuda/include_me.cu")


def test_locator_prefers_the_deeper_match(tmp_path):
    for path in ("a/kernels/gemm.cu", "b/src/kernels/gemm.cu", "gemm.cu"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("//\n")
    locator = Locator(root=tmp_path)
    assert locator.resolve("/build/ci-7/src/kernels/gemm.cu") == "b/src/kernels/gemm.cu"
    assert locator.resolve("/elsewhere/gemm.cu") == "gemm.cu"
    assert locator.resolve(str(tmp_path / "a/kernels/gemm.cu")) == "a/kernels/gemm.cu"
    assert locator.resolve("/build/missing.cu") is None
