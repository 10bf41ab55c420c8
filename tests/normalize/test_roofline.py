"""The roofline's bound per kernel (normalize/roofline.py) on real reports."""

from nsanalyze.normalize.roofline import classify


def test_a_roof_not_measured_is_not_read_as_zero(analyzed):
    """COALDA's profile reports (ncu 2023.3's default set on an RTX 4050 Laptop GPU) hold no SM throughput: the
    kernel was called latency-bound from its memory share alone (30%), the missing compute share read as 0 (an
    expert review). With one roof unmeasured the bound is unknown unless the other is near its roof."""
    from tests.conftest import PUBLIC

    model = analyzed(PUBLIC / "Alaric617R__COALDA__examples__rgb__profile__report__origin.ncu-rep.xz")
    [kernel] = model["kernels"]
    assert "sm_throughput_pct" not in kernel["metrics"] and kernel["roofline"].get("compute_share") is None
    assert 0 < kernel["roofline"]["memory_share"] < 0.6 and kernel["bound"] is None
    assert classify(None, 0.85, 0.6, 0.4) == "memory" and classify(0.3, None, 0.6, 0.4) is None
    assert classify(0.3, 0.2, 0.6, 0.4) == "latency"   # both measured, both low: latency, as before
