"""Scaffold of a new check: its module, its test and its entries in the generated docs.

    python scripts/new_check.py kernel my-check      # nsanalyze/checks/kernel/my_check.py, tests/checks/kernel/test_my_check.py
    python scripts/new_check.py program my-check

The module is registered as it is written (the registry loads every module of checks/KIND), finds
nothing until its run() is written, and documents itself in docs/checks.md and docs/contract.md's
table of check ids, which this regenerates. The test fails until it names a real profile (a fixture)
on which the check finds what it is about: fill in the module and the test, add the fixture if it is new.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

DOC = '''"""{title}.

## What it detects
TODO: the pattern, in the terms of the profile (metrics or timeline parts it reads).

## Why it is slow
TODO: why the hardware or the program loses time.

## Example
```
TODO: code that shows the problem
```

## Instead
```
TODO: the same code fixed
```

## Known problems
TODO: where the check is wrong, and what it cannot see.

## Options
- `min_share`: TODO: the share of the time below which the check stays silent.
"""
'''

KERNEL = DOC + '''
from nsanalyze.checks.base import Check, Finding, KernelView, Threshold, evidence

ID = "{id}"
ADVICE = """TODO: what to do, with a before/after example.

```
TODO
```"""

CHECK = Check(
    id=ID,
    name="TODO.dotted.name",
    title="{title}",
    section="kernel",
    requires=(),  # normalized concepts (normalize/metrics.csv) it cannot judge without
    optional=(),
    collect="--set full",
    relieves=None,
    thresholds={{"min_share": Threshold(0.1, "TODO: why this value")}},
    speedup_model="TODO: how estimated_speedup is computed, in words",
    advice=ADVICE,
)


def run(kernel: KernelView, limits) -> Finding | None:
    return None  # TODO: a Finding(check=ID, title=..., estimated_speedup=..., evidence=..., advice=ADVICE)
'''

PROGRAM = DOC + '''
from nsanalyze.checks.base import Check, Finding, Threshold, evidence

ID = "{id}"
BUDGET_PART = "gpu_compute"  # TODO: the part of the time budget its savings come from (normalize/budget.py PARTS)
ADVICE = """TODO: what to do, with a before/after example.

```
TODO
```"""

CHECK = Check(
    id=ID,
    name="program.TODO",
    title="{title}",
    section="busy",
    requires=(),  # Timeline attributes (normalize/timeline.py) it cannot judge without
    thresholds={{"min_share": Threshold(0.1, "TODO: why this value")}},
    speedup_model="TODO: how estimated_speedup is computed, in words",
    budget_part=BUDGET_PART,
    advice=ADVICE,
)


def run(timeline, limits) -> Finding | None:
    return None  # TODO: a Finding(check=ID, title=..., estimated_speedup=..., evidence=..., advice=ADVICE)
'''

TEST = '''"""`{id}` on a real profile that shows the problem, and silent on one that does not."""

from tests.isolated import analyze_apart

# TODO: a real profile (fixtures/ or fixtures/real/, with the script that recorded it) that shows the problem
PROFILE = None


def test_finds_the_problem_on_a_real_profile():
    assert PROFILE is not None, "name the real profile that shows the problem (and add it under fixtures/)"
    model = analyze_apart([PROFILE])
    findings = [f for f in model["findings"] if f["check"] == "{id}"]
    assert findings, "the check found nothing on the profile that shows its problem"
    # TODO: assert the finding's real values (checked against SQL or NVIDIA's figures), not only that it exists
    assert findings[0]["estimated_savings_ns"] > 0
'''


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=("kernel", "program"))
    parser.add_argument("id", help="the check's id: lower-case words joined by '-' (e.g. shared-memory-spill)")
    parser.add_argument("--title", default="TODO: a one-line title")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)   # the tree to write in (tests)
    args = parser.parse_args(argv)
    from nsanalyze.checks.base import CHECK_ID

    if not CHECK_ID.fullmatch(args.id):
        parser.error(f"{args.id!r} is not lower-case words joined by '-'")
    stem = args.id.replace("-", "_")
    module = args.root / "nsanalyze" / "checks" / args.kind / f"{stem}.py"
    test = args.root / "tests" / "checks" / args.kind / f"test_{stem}.py"
    for path in (module, test):
        if path.exists():
            parser.error(f"{path} exists already")
    template = KERNEL if args.kind == "kernel" else PROGRAM
    module.write_text(template.format(id=args.id, title=args.title))
    test.write_text(TEST.format(id=args.id))
    # the docs come from the registry: regenerated in a fresh process, which loads (and validates) the new module
    docs = subprocess.run([sys.executable, "-m", "nsanalyze.render.checks_doc", str(args.root / "docs")],
                          cwd=args.root, capture_output=True, text=True)
    if docs.returncode:
        module.unlink()
        test.unlink()
        sys.stderr.write(docs.stderr)
        return 1
    for path in (module, test):
        print(f"wrote {path.relative_to(args.root)}")
    sys.stdout.write(docs.stdout.replace(str(args.root) + "/", ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
