"""The labels of dev_suite.cu (shared/profiles/README.md): kernel -> expected top check."""

LABELLED = {
    "aos_update": {"uncoalesced-global"},
    "random_gather": {"uncoalesced-global"},
    "reduce_interleaved": {"bank-conflicts"},
    "sgemm_tiled": {"missing-tensor-cores"},
    "lane_switch": {"warp-divergence"},
    "pointer_chase": {"low-ilp", "low-occupancy"},
    "histogram_global": {"atomic-contention"},
    "register_pressure": {"local-memory-spill"},
    "one_block_too_many": {"tail-effect"},
}

# healthy twin -> the class of finding it must not carry above `low`
HEALTHY_TWINS = {
    "soa_update": None,               # none above info at all
    "reduce_sequential": "bank-conflicts",
    "bf16_gemm_wmma": "missing-tensor-cores",
}
