"""Library recognition by the library's marks (namespace, naming scheme), and the user's source lines."""

import pytest

from nsanalyze.checks.libraries import hot_source_files, library_of


@pytest.mark.parametrize("name, library", [
    ("sgemm_tiled(const float *, const float *, float *, int)", None),            # a word in the name is no mark
    ("reduce_kernel", None),
    ("elementwise_kernel", None),
    ("winograd_conv(float *)", None),
    ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas", "cuBLAS"),
    ("ampere_sgemm_128x64_nn", "cuBLAS"),
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x64_8x5_nn_align1>(T1::Params)", "cuBLAS"),
    ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false>(T13, T6, T6)", "cuBLAS"),
    ("void at::native::reduce_kernel<512, 1>(T3)", "PyTorch"),
    ("void cub::CUB_200200_800_NS::DeviceMergeSortPartitionKernel<bool, int *>(T1)", "CUB/Thrust"),
    ("volta_scudnn_128x64_relu_interior_nn_v1", "cuDNN"),
    ("triton_poi_fused_add_0", "Triton"),
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TN", "cuBLASLt"),
])
def test_library_by_its_marks(name, library):
    assert library_of(name) == library


def test_source_lines_in_the_users_files_make_the_kernel_the_users(dev_suite_report):
    """dev_suite.cu was built with -lineinfo: sgemm_tiled's hot lines are in the user's file, so even a
    cuBLAS-like name would not make it cuBLAS; lines in library headers keep the library."""
    launch = next(l for l in dev_suite_report.launches if l.name == "sgemm_tiled")
    files = hot_source_files(launch.source)
    assert files and all(f.endswith("dev_suite.cu") for f in files)
    assert library_of("ampere_sgemm_128x64_nn", files) is None
    assert library_of("void cutlass::Kernel<X>(X::Params)", ["/opt/cutlass/include/cutlass/gemm/kernel/gemm.h"]) == "CUTLASS"


def test_user_kernels_get_no_library_advice(dev_suite_model):
    sgemm = next(k for k in dev_suite_model["kernels"] if k["name"] == "sgemm_tiled")
    assert sgemm["library"] is None
    finding = next(f for f in dev_suite_model["findings"] if f["kernel_name"] == "sgemm_tiled")
    assert "cuBLAS kernel" not in finding["advice"]


def test_a_closed_librarys_grid_is_not_its_callers_to_fix(analyzed):
    """gpt_bf16_full (H200): tail-effect on cuBLASLt's nvjet GEMM, 132 blocks on 132 SMs (a persistent kernel, one
    block an SM), advised the user to write a persistent, grid-stride kernel (an expert's read). The grid is the
    library's: like the code-level findings, the launch-shape ones on a closed library's kernel are capped at info
    with the note that sends the user to the call."""
    from tests.conftest import REAL

    model = analyzed(REAL / "gpt_bf16_full.ncu-rep.xz")
    libraries = {k["name"]: k.get("library") for k in model["kernels"]}
    tails = [f for f in model["findings"] if f["check"] == "tail-effect" and libraries.get(f["kernel_name"]) == "cuBLASLt"]
    assert tails
    for finding in tails:
        assert finding["severity"] == "info" and any(n.startswith("capped at info: a cuBLASLt kernel") for n in finding["notes"])
