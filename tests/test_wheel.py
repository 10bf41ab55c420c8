"""The package as a user installs it: a wheel built from the checkout, installed with its dependencies
in a clean virtual environment, renders every report format from another directory (templates and
data files shipped), with a card for every finding."""

import importlib.util
import re
import subprocess
import sys
import zipfile

from tests.conftest import DEV_SUITE_NCU, REAL, ROOT


def test_wheel_in_a_clean_venv_renders_every_format_from_elsewhere(tmp_path):
    dist, venv, work = tmp_path / "dist", tmp_path / "venv", tmp_path / "work"
    work.mkdir()
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist),
                    str(ROOT)], check=True, cwd=tmp_path)
    wheel = next(dist.glob("nsanalyze-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "nsanalyze/render/templates/report.html.j2" in names and "nsanalyze/normalize/gpu_clocks.csv" in names
    # the clean environment without a pip of its own (ensurepip's 8 s): the installer of the suite's environment
    # (uv where make test's set-up has it: 4 s from the cache the set-up filled, against pip's 20 s) installs into
    # it, without compiling every installed module ahead (pip: 27 s of 43 s); the runs below compile what they import
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    target = str(venv / "bin" / "python")
    install = (["uv", "pip", "install", "--python", target] if importlib.util.find_spec("uv")
               else ["pip", "--python", target, "install", "--no-compile"])
    subprocess.run([sys.executable, "-m", *install, "-q", str(wheel)], check=True, cwd=tmp_path)
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path), "NSANALYZE_CACHE": str(tmp_path / "cache")}
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import nsanalyze; print(nsanalyze.__file__)"],
                           env=env, cwd=work, capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(venv))
    # A lean install: Dask only with the extra (pip install 'nsanalyze[dask]'), and --scheduler says so.
    lean = subprocess.run([str(venv / "bin" / "python"), "-c", "import importlib.util as u; print(u.find_spec('distributed'))"],
                          env=env, cwd=work, capture_output=True, text=True, check=True).stdout
    assert lean.strip() == "None"
    refused = subprocess.run([str(venv / "bin" / "nsanalyze"), "batch", str(work), "--db", "h.sqlite", "--scheduler",
                              "tcp://127.0.0.1:8786"], env=env, cwd=work, capture_output=True, text=True)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "nsanalyze[dask]" in refused.stderr
    for profile in (DEV_SUITE_NCU, REAL / "ddp_gpu_all_nsys.sqlite.xz"):
        outputs = [f"{profile.name}.{ext}" for ext in ("html", "pdf", "md", "sarif", "json")]
        result = subprocess.run([str(venv / "bin" / "nsanalyze"), "report", str(profile),
                                 *[a for o in outputs for a in ("-o", o)]], env=env, cwd=work, capture_output=True,
                                text=True)
        assert result.returncode == 0, result.stderr
        for name in outputs:
            assert (work / name).stat().st_size > 1000
        import json

        shown = {f["rank"] for f in json.loads((work / outputs[-1]).read_text())["findings"] if f["severity"] != "info"}
        cards = set(map(int, re.findall(r'<article class="finding" id="f(\d+)"', (work / outputs[0]).read_text())))
        assert shown and shown <= cards
