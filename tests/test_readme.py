"""What the README promises a new user holds for the code as it is."""

import os
import re
import subprocess
import sys

from tests.conftest import ROOT


def test_the_cache_limit_is_in_the_readme_as_the_code_has_it():
    """It was only in docs/reliability.md: a user whose disk filled found it nowhere they would look."""
    env = {k: v for k, v in os.environ.items() if k != "NSANALYZE_CACHE_MAX_GB"}
    default = float(subprocess.run([sys.executable, "-c", "from nsanalyze.read.files import CACHE_LIMIT_BYTES as c; "
                                    "print(c)"], env=env, capture_output=True, text=True, check=True).stdout)
    readme = (ROOT / "README.md").read_text()
    stated = re.search(r"The cache holds at most (\d+) GiB \(`NSANALYZE_CACHE_MAX_GB`\)", readme)
    assert stated and int(stated.group(1)) * 2**30 == default
    assert "`$NSANALYZE_CACHE`" in readme
