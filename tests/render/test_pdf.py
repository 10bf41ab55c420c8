"""PDF through WeasyPrint: pages render to PNG with pdftoppm, text extracts, page numbers printed."""

import subprocess

from nsanalyze.render import write_report


def test_pdf_pages_and_text(joined_model, tmp_path):
    path = tmp_path / "report.pdf"
    write_report(joined_model, str(path))
    info = subprocess.run(["pdfinfo", str(path)], capture_output=True, text=True, check=True).stdout
    pages = int(next(line.split()[-1] for line in info.splitlines() if line.startswith("Pages:")))
    assert 3 <= pages <= 60
    subprocess.run(["pdftoppm", "-r", "40", "-png", "-f", "1", "-l", "2", str(path), str(tmp_path / "page")], check=True)
    assert (tmp_path / "page-01.png").stat().st_size > 5_000
    text = subprocess.run(["pdftotext", str(path), "-"], capture_output=True, text=True, check=True).stdout
    assert "What to fix first" in text and "missing-tensor-cores" in text and "sgemm_tiled" in text
    assert f"page 1 of {pages}" in text
