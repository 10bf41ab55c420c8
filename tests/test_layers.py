"""One direction of flow: read -> normalize -> checks -> rank -> render. A module may import its own
layer, earlier layers and the shared helpers (errors, numbers, text), never a later layer."""
import ast
from pathlib import Path

import nsanalyze

PACKAGE = Path(nsanalyze.__file__).parent
LAYERS = ["read", "normalize", "checks", "rank", "render"]


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "nsanalyze" or len(parts) < 2:
        return None
    return LAYERS.index(parts[1]) if parts[1] in LAYERS else None


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def test_no_module_imports_a_later_layer():
    backwards = []
    for path in PACKAGE.rglob("*.py"):
        module = "nsanalyze." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        own = _layer(module)
        if own is None:
            continue
        backwards += [f"{module} imports {name}" for name in _imports(path)
                      if (_layer(name) or -1) > own]
    assert backwards == []
    assert len(list((PACKAGE / "checks").rglob("*.py"))) > 20   # the walk saw the checks
