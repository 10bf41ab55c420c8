"""The intended import graph of nsanalyze, whole: read -> normalize -> checks -> rank -> render, the shared
helpers beside them, and the top-level modules (analyze, program, cli, diff, batch, trend, stats, ...) each
with the layers it may use. Every import counts, at module level or inside a function, absolute or relative;
no import cycle, and no module replaces another module's attributes (a monkeypatch). The checker runs on the
tree, and on the leaks issue 39 found, to prove it catches each."""
import ast
from functools import lru_cache
from pathlib import Path

import nsanalyze

PACKAGE = Path(nsanalyze.__file__).parent
LAYERS = ("read", "normalize", "checks", "rank", "render")
# Imported by any module: they import nothing of nsanalyze but each other.
SHARED = {"nsanalyze", "nsanalyze.errors", "nsanalyze.numbers", "nsanalyze.text", "nsanalyze.native_stderr",
          "nsanalyze.patterns"}
# What each group may import besides itself and the shared helpers.
ALLOWED = {
    "shared": set(),
    "read": set(),
    "normalize": {"read"},
    "checks": {"read", "normalize"},
    "rank": {"read", "normalize", "checks"},
    "render": {"checks", "rank"},               # neither the readers nor normalize's internals
    "config": {"checks"},
    "kernel_filter": {"read", "normalize"},     # `-k` as a parameter: the readers' and the model's narrowing
    "program": {"read", "normalize", "checks", "rank", "render", "kernel_filter"},
    "analyze": {"read", "normalize", "checks", "rank", "program", "config", "kernel_filter"},
    "metrics_export": {"read", "normalize", "render", "kernel_filter"},
    "figures": {"normalize"},                   # per-step figures of finished reports, for diff, batch, trend
    "batch": {"read", "normalize", "analyze", "render", "figures"},
    "diff": {"analyze", "render", "figures"},   # works on finished reports: not on normalize's data
    "trend": {"analyze", "render"},
    "stats": {"read", "normalize", "render"},
    "whatif": {"read", "normalize", "checks"},     # replays an export's steps (normalize.critical_path)
    "_forkserver_guard": set(),
    "cli": {"read", "normalize", "checks", "rank", "render", "config", "program", "analyze", "metrics_export",
            "kernel_filter", "batch", "diff", "trend", "stats", "figures", "whatif"},
    "__main__": {"cli"},
}
# Leaks issue 39 lists that other work owns; each line names who. Remove a line when its leak is gone (the
# test then keeps it gone).
KNOWN: set[str] = set()   # leaks left on purpose: none


def group(module: str) -> str:
    if module in SHARED:
        return "shared"
    return module.split(".")[1]


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["nsanalyze", *parts])


@lru_cache(maxsize=None)
def _parsed(source: str) -> ast.Module:
    """A module's tree, parsed once per text: the checker reads each tree several times, on the clean tree and on
    each leak's copy of it (read only: nothing changes a tree)."""
    return ast.parse(source)


def _imports(module: str, source: str, modules: set[str], is_package: bool):
    """(imported module, node) for every nsanalyze import in the source, wherever it stands."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(_parsed(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "nsanalyze":
                    yield alias.name, alias.asname or alias.name, node
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            if name.split(".")[0] != "nsanalyze":
                continue
            for alias in node.names:
                sub = f"{name}.{alias.name}"
                yield (sub if sub in modules else name), alias.asname or alias.name, node


def leaks(sources: dict[str, tuple[str, bool]]) -> list[str]:
    """What breaks the intended graph in `sources` (module -> (source text, is a package))."""
    modules = set(sources)
    found, edges = [], {m: set() for m in modules}
    for module, (source, is_package) in sources.items():
        own = group(module)
        bound = {}
        for name, local, _ in _imports(module, source, modules, is_package):
            target = next((m for m in (name, name.rpartition(".")[0]) if m in modules), None)
            if target is None or target == module:
                continue
            edges[module].add(target)
            bound[local] = target
            other = group(target)
            if other != own and other != "shared" and other not in ALLOWED.get(own, set()):
                found.append(f"{own} imports {other}: {module} -> {target}")
        for node in ast.walk(_parsed(source)):   # module.attr = ..., setattr(module, "attr", ...)
            if isinstance(node, (ast.Assign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name):
                        name = t.value.id
                        if name in bound:
                            found.append(f"monkeypatch: {module} sets {bound[name]}.{t.attr}")
                        elif name == "module":   # a loop over imported modules
                            for target in sorted(set(bound.values()) - {module}):
                                if f"{target}.{t.attr}" in _attributes(sources, target, t.attr):
                                    found.append(f"monkeypatch: {module} sets {target}.{t.attr}")
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr"
                  and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id in bound):
                found.append(f"monkeypatch: {module} sets {bound[node.args[0].id]}.*")
    found += [f"import cycle: {' -> '.join(cycle)}" for cycle in _cycles(edges)]
    return sorted(set(found))


def _attributes(sources, module: str, attr: str) -> set[str]:
    """`module.attr` when the module binds that name (imports or defines it)."""
    tree = _parsed(sources[module][0])
    for node in tree.body:
        names = ([a.asname or a.name for a in node.names] if isinstance(node, (ast.Import, ast.ImportFrom))
                 else [node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else [])
        if attr in names:
            return {f"{module}.{attr}"}
    return set()


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected group of modules (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members = []
            while True:
                w = stack.pop()
                on.discard(w)
                members.append(w)
                if w == v:
                    break
            if len(members) > 1:
                out.append(sorted(members) + [sorted(members)[0]])

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def tree_sources() -> dict[str, tuple[str, bool]]:
    return {_module_name(p, PACKAGE): (p.read_text(), p.name == "__init__.py") for p in PACKAGE.rglob("*.py")}


def test_the_tree_holds_the_intended_graph():
    sources = tree_sources()
    assert len([m for m in sources if m.startswith("nsanalyze.checks.")]) > 20   # the walk saw the checks
    assert {group(m) for m in sources} <= set(ALLOWED), "a new top-level module: give it its place in ALLOWED"
    found = leaks(sources)
    assert [f for f in found if f not in KNOWN] == []
    assert sorted(KNOWN - set(found)) == [], "a known leak is gone: remove it from KNOWN"


def test_each_leak_of_issue_39_is_caught():
    """The tree as it was before the fixes: each leak alone in an otherwise clean tree is found."""
    clean = tree_sources()
    cases = {
        "render imports read: nsanalyze.render.charts -> nsanalyze.read.ncu":
            ("nsanalyze.render.charts", "from nsanalyze.read.ncu import _NativeStderr\n"),
        "import cycle: nsanalyze.read.files -> nsanalyze.read.kineto -> nsanalyze.read.files":
            ("nsanalyze.read.files", "def detect_kind(path):\n    from nsanalyze.read.kineto import looks_like_json\n"),
        "render imports normalize: nsanalyze.render.html -> nsanalyze.normalize.steps":
            ("nsanalyze.render.html", "def f():\n    from ..normalize.steps import median_noise\n"),
        "monkeypatch: nsanalyze.batch sets nsanalyze.analyze.read_profile":
            ("nsanalyze.batch", "import nsanalyze.analyze as a\ndef f():\n    a.read_profile = None\n"),
        "read imports normalize: nsanalyze.read.nsys -> nsanalyze.normalize.activity":
            ("nsanalyze.read.nsys", "from nsanalyze.normalize import activity\n"),
    }
    for leak, (module, extra) in cases.items():
        sources = dict(clean)
        text, is_package = sources[module]
        sources[module] = (text + "\n" + extra, is_package)
        assert leak in leaks(sources), (leak, leaks(sources))
