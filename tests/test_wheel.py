"""The package as a user installs it: a wheel built from the checkout, installed apart from the
checkout, renders every report format from another directory (templates and data files shipped)."""

import subprocess
import sys
import zipfile

from tests.conftest import DEV_SUITE_NCU, ROOT


def test_wheel_renders_every_format_from_elsewhere(tmp_path):
    dist, site, work = tmp_path / "dist", tmp_path / "site", tmp_path / "work"
    work.mkdir()
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist),
                    str(ROOT)], check=True, cwd=tmp_path)
    wheel = next(dist.glob("nsanalyze-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "nsanalyze/render/templates/report.html.j2" in names and "nsanalyze/normalize/gpu_clocks.csv" in names
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                   check=True)
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
           "NSANALYZE_CACHE": str(tmp_path / "cache")}
    where = subprocess.run([sys.executable, "-c", "import nsanalyze; print(nsanalyze.__file__)"], env=env, cwd=work,
                           capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(site))
    outputs = ["r.html", "r.pdf", "r.md", "r.sarif"]
    result = subprocess.run([sys.executable, "-m", "nsanalyze", "report", str(DEV_SUITE_NCU),
                             *[a for o in outputs for a in ("-o", o)]], env=env, cwd=work, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    for name in outputs:
        assert (work / name).stat().st_size > 1000
    assert '<article class="finding"' in (work / "r.html").read_text()
