"""One format dispatch: every kind of document picks its renderer from one registry (render.formats)."""

import re

import pytest

from nsanalyze.errors import InputError
from nsanalyze.render.formats import RENDERERS, renderer_for
from tests.conftest import ROOT


@pytest.mark.parametrize("kind", RENDERERS)
def test_each_kind_maps_its_extensions_and_refuses_others(kind):
    for renderer in RENDERERS[kind].values():
        assert renderer.extension.startswith(".") and renderer.name
        for extension in renderer.extensions:
            assert renderer_for(f"out/r{extension.upper()}", kind) is renderer
    assert renderer_for("-", kind).name == "json"
    with pytest.raises(InputError) as refused:
        renderer_for("out/r.docx", kind)
    assert all(r.extension in refused.value.reason for r in RENDERERS[kind].values())


def test_the_cli_names_no_format_of_its_own():
    """cli.py asks the registry; no if/elif over format names or extensions is left in it."""
    cli = (ROOT / "nsanalyze" / "cli.py").read_text()
    assert not re.search(r'"(markdown|html|sarif|pdf)"|"\.(md|html|sarif|pdf)"', cli)
