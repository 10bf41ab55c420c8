"""Every check is one declared object (checks/base.py's Check), validated when the registry loads it:
a misspelled field, a metadata global beside the declaration, a duplicate id or an unknown REQUIRES entry
stops the load. The bad checks below are real check modules with one mistake each."""

import importlib
import re
import sys
from pathlib import Path

import pytest

from nsanalyze.checks import DOC_HEADINGS, CheckDeclarationError, all_checks, load
from nsanalyze.checks.base import SECTIONS, Check

CHECKS = Path(__file__).resolve().parents[2] / "nsanalyze" / "checks"


def test_metadata_and_headings():
    for check in all_checks():
        assert isinstance(check, Check) and check.kind in ("kernel", "program") and callable(check.run)
        assert check.section in SECTIONS, check.id
        for heading in DOC_HEADINGS:
            assert f"## {heading}" in check.doc, (check.id, heading)
        options = re.findall(r"^- `(\w+)`", check.doc.split("## Options")[1], flags=re.M)
        assert set(options) <= set(check.thresholds), (check.id, options)
        assert "```" in check.advice, check.id


def test_ids_are_unique_across_kinds():
    """clock-throttling was both a kernel and a program check: SARIF pointed kernel findings at the program rule."""
    ids = [c.id for c in all_checks()]
    assert len(ids) == len(set(ids))
    assert {c.id: c.kind for c in all_checks() if "clock" in c.id} == {"clock-throttling": "kernel",
                                                                       "gpu-clock-throttling": "program"}


def _package(tmp_path, monkeypatch, kernel: dict[str, str], program: dict[str, str]) -> dict[str, str]:
    """A package of check modules ({file: source}) importable as `badchecks_N.kernel` / `.program`."""
    name = f"badchecks_{len(list(tmp_path.parent.iterdir()))}_{tmp_path.name}".replace("-", "_")
    for kind, modules in (("kernel", kernel), ("program", program)):
        folder = tmp_path / name / kind
        folder.mkdir(parents=True)
        (folder / "__init__.py").write_text("")
        for file, source in modules.items():
            (folder / file).write_text(source)
    (tmp_path / name / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    return {"kernel": f"{name}.kernel", "program": f"{name}.program"}


def _source(kind: str, module: str, old: str = "", new: str = "") -> str:
    text = (CHECKS / kind / f"{module}.py").read_text()
    assert old in text, (module, old)   # the mistake is made in the real module's text
    return text.replace(old, new, 1)


def test_real_modules_copied_load(tmp_path, monkeypatch):
    """The harness itself: the unchanged modules load from a copy, so each failure below is its one mistake."""
    packages = _package(tmp_path, monkeypatch, {"tail_effect.py": _source("kernel", "tail_effect")},
                        {"host_sync.py": _source("program", "host_sync")})
    assert [c.id for c in load(packages)] == ["tail-effect", "host-sync"]


def test_a_misspelled_field_fails_at_import(tmp_path, monkeypatch):
    packages = _package(tmp_path, monkeypatch,
                        {"tail_effect.py": _source("kernel", "tail_effect", "    relieves=None,", "    releives=None,")}, {})
    with pytest.raises(TypeError, match="releives"):
        load(packages)


def test_a_metadata_global_beside_the_declaration_fails(tmp_path, monkeypatch):
    """`RELEIVES = "memory"` (or RELIEVES, the old convention) outside CHECK would relieve nothing, silently."""
    for line in ('RELEIVES = "memory"', 'RELIEVES = "memory"', "CHANGE = None"):
        source = _source("kernel", "tail_effect", 'ID = "tail-effect"\n', f'ID = "tail-effect"\n{line}\n')
        packages = _package(tmp_path / line[:4], monkeypatch, {"tail_effect.py": source}, {})
        with pytest.raises(CheckDeclarationError, match=f"module global {line.split()[0]} .*CHECK = Check"):
            load(packages)


def test_constants_run_reads_are_the_declared_ones(tmp_path, monkeypatch):
    """run() reads ID and BUDGET_PART: a declaration naming other values would price one part and claim another."""
    source = _source("program", "host_sync", "    budget_part=BUDGET_PART,", '    budget_part="idle_host",')
    packages = _package(tmp_path, monkeypatch, {}, {"host_sync.py": source})
    with pytest.raises(CheckDeclarationError, match="BUDGET_PART 'idle_sync' is not the declaration's budget_part"):
        load(packages)


def test_a_misspelled_applies_fails(tmp_path, monkeypatch):
    source = _source("kernel", "missing_tensor_cores", "def applies(kernel", "def aplies(kernel")
    packages = _package(tmp_path, monkeypatch, {"missing_tensor_cores.py": source}, {})
    with pytest.raises(CheckDeclarationError, match=r"aplies\(\) looks like `applies`"):
        load(packages)


def test_a_duplicate_id_across_kinds_fails(tmp_path, monkeypatch):
    packages = _package(tmp_path, monkeypatch, {"tail_effect.py": _source("kernel", "tail_effect")},
                        {"host_sync.py": _source("program", "host_sync", 'ID = "host-sync"', 'ID = "tail-effect"')})
    with pytest.raises(CheckDeclarationError, match="'tail-effect' is declared twice"):
        load(packages)


def test_an_unknown_requires_entry_fails(tmp_path, monkeypatch):
    """Kernel checks require normalized concepts (normalize/metrics.csv and kernels.py's derived ones);
    program checks, Timeline attributes, which run_program_checks reads by name: a typo was 'not judged' forever."""
    kernel = _source("kernel", "tail_effect", 'requires=("sm_busy_imbalance",)', 'requires=("sm_busy_imbalanse",)')
    with pytest.raises(CheckDeclarationError, match="sm_busy_imbalanse"):
        load(_package(tmp_path / "k", monkeypatch, {"tail_effect.py": kernel}, {}))
    program = _source("program", "host_sync", 'requires=("syncs", "budget")', 'requires=("syncs", "bugdet")')
    with pytest.raises(CheckDeclarationError, match="bugdet"):
        load(_package(tmp_path / "p", monkeypatch, {}, {"host_sync.py": program}))
    # a kernel concept is no Timeline attribute: the vocabulary is the kind's
    program = _source("program", "host_sync", 'requires=("syncs", "budget")', 'requires=("syncs", "sm_busy_imbalance")')
    with pytest.raises(CheckDeclarationError, match="sm_busy_imbalance"):
        load(_package(tmp_path / "q", monkeypatch, {}, {"host_sync.py": program}))


def test_an_unknown_section_fails_at_import(tmp_path, monkeypatch):
    packages = _package(tmp_path, monkeypatch,
                        {"tail_effect.py": _source("kernel", "tail_effect", 'section="kernel"', 'section="kernels"')}, {})
    with pytest.raises(ValueError, match="section 'kernels'"):
        load(packages)


@pytest.fixture(autouse=True)
def _forget_bad_packages():
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith("badchecks_"):
            del sys.modules[name]


def test_sarif_results_point_at_their_own_rule(analyzed):
    """The kernel clock-throttling finding of a real report (an H200 kernel at 18.4 us of savings) points
    at the kernel rule; with two checks of one id its ruleIndex named the program check's rule."""
    import json

    from nsanalyze.render.sarif import render
    from tests.conftest import REAL

    model = analyzed(REAL / "attn_naive_full.ncu-rep.xz")
    run = json.loads(render(model))["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [c.id for c in all_checks()]
    assert all(rules[r["ruleIndex"]]["id"] == r["ruleId"] for r in run["results"])
    clock = next(r for r in run["results"] if r["ruleId"] == "clock-throttling")
    assert rules[clock["ruleIndex"]]["shortDescription"]["text"] == "SM clock below the device's maximum"


def _import_checks(tmp_path, kind: str, file: str, source: str):
    """`import nsanalyze.checks` in a fresh interpreter, from a copy of the package holding one more check module
    (`file`, beside the real ones): the package's import itself must refuse a broken declaration."""
    import shutil
    import subprocess

    root = tmp_path / "tree"
    shutil.copytree(CHECKS.parent, root / "nsanalyze", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "nsanalyze" / "checks" / kind / file).write_text(source)
    return subprocess.run([sys.executable, "-P", "-c", "import nsanalyze.checks"], cwd=root, capture_output=True,
                          text=True, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})


def _renamed(kind: str, module: str, check_id: str, old: str = "", new: str = "") -> str:
    """A real check module under another id, with one mistake (or none): a new check, as a developer adds one."""
    text = _source(kind, module, old, new)
    original = re.search(r'^ID = "([a-z0-9-]+)"', text, flags=re.M).group(1)
    return text.replace(f'ID = "{original}"', f'ID = "{check_id}"', 1)


def test_importing_the_checks_package_accepts_a_good_new_check(tmp_path):
    """The harness of the three below: a copy of a real check under a new id imports cleanly."""
    run = _import_checks(tmp_path, "kernel", "tail_effect_copy.py", _renamed("kernel", "tail_effect", "tail-effect-copy"))
    assert run.returncode == 0, run.stderr


def test_importing_the_checks_package_fails_on_a_misspelled_attribute(tmp_path):
    """`RELEIVES = "memory"` beside the declaration: the import of nsanalyze.checks stops, naming the field."""
    source = _renamed("kernel", "tail_effect", "tail-effect-copy", "CHECK = Check(", 'RELEIVES = "memory"\n\nCHECK = Check(')
    run = _import_checks(tmp_path, "kernel", "tail_effect_copy.py", source)
    assert run.returncode == 1
    assert "CheckDeclarationError: nsanalyze.checks.kernel.tail_effect_copy (tail-effect-copy): module global " \
           "RELEIVES looks like the declaration's field `relieves`" in run.stderr, run.stderr[-2000:]


def test_importing_the_checks_package_fails_on_a_duplicate_id(tmp_path):
    """A program check declaring a kernel check's id (clock-throttling was both): the import stops."""
    run = _import_checks(tmp_path, "program", "host_sync_copy.py", _renamed("program", "host_sync", "tail-effect"))
    assert run.returncode == 1
    assert "CheckDeclarationError: check id 'tail-effect' is declared twice (kernel and program checks)" in run.stderr, \
        run.stderr[-2000:]


def test_importing_the_checks_package_fails_on_an_unknown_requires_entry(tmp_path):
    """A misspelled REQUIRES entry made the check 'not judged' on every profile: now the import stops."""
    source = _renamed("program", "host_sync", "host-sync-copy", 'requires=("syncs", "budget")', 'requires=("syncs", "bugdet")')
    run = _import_checks(tmp_path, "program", "host_sync_copy.py", source)
    assert run.returncode == 1
    assert "CheckDeclarationError: check 'host-sync-copy': requires or reads bugdet, which no program check is given" \
        in run.stderr, run.stderr[-2000:]
