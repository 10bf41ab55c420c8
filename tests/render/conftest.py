import pytest

from nsanalyze.analyze import analyze
from tests.conftest import DEV_INFER_NSYS, DEV_SUITE_NCU, DEV_SUITE_NSYS


@pytest.fixture(scope="session")
def joined_model():
    """The dev suite's ncu report joined with its nsys export: the report `make report` writes."""
    from tests.isolated import analyze_apart, shared

    return shared("analyze", analyze_apart, [DEV_SUITE_NCU, DEV_SUITE_NSYS])


@pytest.fixture(scope="session")
def infer_model():
    from tests.isolated import shared

    return shared("analyze", analyze, [str(DEV_INFER_NSYS)])


@pytest.fixture
def hostile_model(joined_model):
    """The joined model with program-controlled text replaced by markup that must stay text."""
    import copy

    model = copy.deepcopy(joined_model)
    evil = "<img src=x onerror=alert(1)><script>alert(2)</script>|**bold**|"
    model["kernels"][0]["name"] = evil
    model["findings"][0]["kernel_name"] = evil
    model["timeline"]["gaps"][0]["nvtx_range"] = "<script>alert(3)</script>"
    model["timeline"]["ranges"][0]["name"] = "<script>alert(4)</script>"
    return model
