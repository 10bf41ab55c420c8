"""scripts/new_check.py: a new check is its module, its test and the regenerated docs, nothing else; the
registry takes the module as written, and the test it writes fails until it is filled in."""

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """A copy of the source tree: the package, the docs and the tests' helpers."""
    root = tmp_path_factory.mktemp("tree")
    shutil.copytree(ROOT / "nsanalyze", root / "nsanalyze", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "docs", root / "docs")
    shutil.copytree(ROOT / "scripts", root / "scripts")
    (root / "tests" / "checks" / "kernel").mkdir(parents=True)
    (root / "tests" / "checks" / "program").mkdir(parents=True)
    for name in ("__init__.py", "isolated.py"):
        shutil.copy(ROOT / "tests" / name, root / "tests" / name)
    return root


def _python(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-P", *args], cwd=root, capture_output=True, text=True,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize("kind", ["kernel", "program"])
def test_the_scaffold_writes_a_check_its_test_and_its_docs(tree, kind):
    before = _files(tree)
    made = _python(tree, "scripts/new_check.py", kind, f"new-{kind}-thing", "--title", "A new thing")
    assert made.returncode == 0, made.stderr
    after = _files(tree)
    changed = {p for p in after if before.get(p) != after[p]}
    stem = f"new_{kind}_thing"
    assert changed == {f"nsanalyze/checks/{kind}/{stem}.py", f"tests/checks/{kind}/test_{stem}.py",
                       "docs/checks.md", "docs/contract.md"}
    # registered as written, documented from the registry
    listed = _python(tree, "-c", "from nsanalyze.checks import all_checks; "
                                 "print({c.id: c.kind for c in all_checks()})")
    assert f"'new-{kind}-thing': '{kind}'" in listed.stdout, listed.stderr
    assert f"<a id=\"new-{kind}-thing\"></a>" in (tree / "docs" / "checks.md").read_text()
    assert f"| `new-{kind}-thing` | {kind} |" in (tree / "docs" / "contract.md").read_text()
    current = _python(tree, "-m", "nsanalyze.render.checks_doc", "docs")
    assert current.returncode == 0 and current.stdout == ""   # the docs written are the generated ones
    # the test it writes fails until it names a real profile on which the check finds its problem
    test = _python(tree, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"tests/checks/{kind}/test_{stem}.py")
    assert test.returncode == 1 and "name the real profile that shows the problem" in test.stdout, test.stdout


def test_a_second_check_of_the_same_id_is_refused(tree):
    made = _python(tree, "scripts/new_check.py", "program", "tail-effect")
    assert made.returncode == 1 and "declared twice" in made.stderr
    assert not (tree / "nsanalyze" / "checks" / "program" / "tail_effect.py").exists()
    bad = _python(tree, "scripts/new_check.py", "kernel", "Bad_Name")
    assert bad.returncode == 2 and "lower-case words" in bad.stderr
