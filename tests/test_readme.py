"""What the README promises a new user holds for the code as it is."""

import os
import re
import subprocess
import sys

from tests.conftest import ROOT


def test_the_cache_limit_is_in_the_readme_as_the_code_has_it():
    """It was only in docs/reliability.md: a user whose disk filled found it nowhere they would look."""
    env = {k: v for k, v in os.environ.items() if k != "NSANALYZE_CACHE_MAX_GB"}
    default = float(subprocess.run([sys.executable, "-c", "from nsanalyze.read.files import cache_limit_bytes as c; "
                                    "print(c())"], env=env, capture_output=True, text=True, check=True).stdout)
    readme = (ROOT / "README.md").read_text()
    stated = re.search(r"The cache holds at most (\d+) GiB \(`NSANALYZE_CACHE_MAX_GB`\)", readme)
    assert stated and int(stated.group(1)) * 2**30 == default
    assert "`$NSANALYZE_CACHE`" in readme


def _readme_gate_runs() -> list[tuple[list[str], list[str]]]:
    """The README's CI-gate example: each `$ nsanalyze ...` command with the `nsanalyze: --fail-on` lines
    it shows under it."""
    import shlex

    text = (ROOT / "README.md").read_text()
    block = text[text.index("**In CI, the gate says why.**"):text.index("**Every finding is a SARIF result.**")]
    runs = []
    for line in block.splitlines():
        line = line.strip()
        if line.startswith("$ nsanalyze "):
            runs.append((shlex.split(line[2:])[1:], []))
        elif line.startswith("nsanalyze: --fail-on") and runs:
            runs[-1][1].append(line)
    return runs


def test_the_readme_shows_the_gate_output_as_it_is(tmp_path):
    """The CI gate's lines in the README are what the commands print now, one line per tripping finding;
    the SARIF excerpt is the program finding the second command writes (ruleIndex left out, as it says)."""
    import json

    runs = _readme_gate_runs()
    assert len(runs) == 2 and all(shown for _, shown in runs)
    for arguments, shown in runs:
        arguments = [str(tmp_path / "findings.sarif") if a == "findings.sarif" else a for a in arguments]
        done = subprocess.run([sys.executable, "-m", "nsanalyze", *arguments], cwd=ROOT, capture_output=True,
                              text=True, env={**os.environ, "COLUMNS": "200"})
        assert done.returncode == 1
        assert [line for line in done.stderr.splitlines() if line.startswith("nsanalyze: --fail-on")] == shown
    readme = (ROOT / "README.md").read_text()
    excerpt = readme[readme.index("fingerprint, so an nsys-only run"):readme.index("(`ruleIndex` left out here.)")]
    excerpt = json.loads(excerpt[excerpt.index("{"):excerpt.rindex("}") + 1])
    first = json.loads((tmp_path / "findings.sarif").read_text())["runs"][0]["results"][0]
    first.pop("ruleIndex", None)
    assert first == excerpt
