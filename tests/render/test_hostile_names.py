"""Names from profiles never become live links, images or HTML: a real nsys export whose kernel and NVTX
names, and a real PyTorch profiler trace whose op names, are made hostile, rendered to Markdown (read
by a CommonMark parser, as GitHub reads a comment) and to HTML (read by headless Chromium's DOM)."""

import gzip
import json
import shutil
import sqlite3

import pytest
from markdown_it import MarkdownIt

from nsanalyze.analyze import analyze
from nsanalyze.read.files import open_local
from nsanalyze.render import write_reports
from tests.conftest import DEV_SUITE_NSYS, REAL
from tests.render.test_html import CHROMIUM_ARGS

HOSTILE = ["[x](javascript:alert(1))", "[x](//e)", "![i](http://e/i.png)", "<script>alert(1)</script>",
           "a`b``c[x](//e)", "<img src=x onerror=alert(1)>", "<a href=//e>x</a>", "`[x](//e)`"]


def hostile_nsys(tmp_path):
    path = tmp_path / "hostile.sqlite"
    shutil.copy(open_local(DEV_SUITE_NSYS)[1], path)
    with sqlite3.connect(path) as db:
        ids = [r[0] for r in db.execute("SELECT shortName FROM CUPTI_ACTIVITY_KIND_KERNEL UNION "
                                        "SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY 1")]
        for i, string_id in enumerate(ids):
            db.execute("UPDATE StringIds SET value = ? WHERE id = ?", (f"{HOSTILE[i % len(HOSTILE)]}k{i}", string_id))
        rows = db.execute("SELECT rowid FROM NVTX_EVENTS WHERE text IS NOT NULL").fetchall()
        for i, (rowid,) in enumerate(rows):
            db.execute("UPDATE NVTX_EVENTS SET text = ? WHERE rowid = ?", (f"{HOSTILE[(i + 3) % len(HOSTILE)]}r{i}", rowid))
    return path


def hostile_trace(tmp_path):
    """graphs_eager's trace with every CPU op and annotation renamed: the launch finding names the op that
    launches most, in its title and its advice."""
    trace = json.loads(gzip.decompress((REAL / "graphs_eager_kineto.json.gz").read_bytes()))
    for i, event in enumerate(trace["traceEvents"]):
        if event.get("cat") in ("cpu_op", "user_annotation") and "name" in event:
            event["name"] = HOSTILE[i % len(HOSTILE)] + event["name"]
    path = tmp_path / "hostile.pt.trace.json"
    path.write_text(json.dumps(trace))
    return path


@pytest.fixture(params=["nsys", "kineto"])
def reports(request, tmp_path):
    path = hostile_nsys(tmp_path) if request.param == "nsys" else hostile_trace(tmp_path)
    model = analyze([str(path)])
    names = {k["name"] for k in model["kernels"]} | {r["name"] for r in model["timeline"].get("ranges", [])}
    if request.param == "kineto":
        names = {w["op"] for w in model["timeline"]["launches"]["by_op"]}
        assert any(h in f["title"] for f in model["findings"] for h in HOSTILE)   # the op reached a finding
    assert sum(any(h in str(n) for h in HOSTILE) for n in names) >= 3   # the names reached the model
    md, html = tmp_path / "r.md", tmp_path / "r.html"
    write_reports(model, [str(md), str(html)])
    return md, html


def test_markdown_holds_no_live_link_image_or_html(reports):
    md, _ = reports
    page = MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(md.read_text())   # raw HTML passes
    for tag in ("<a", "<img", "<script", "<iframe"):
        assert tag not in page, page[max(0, page.find(tag) - 200):page.find(tag) + 200]
    assert "](//e)" in page or "&lt;script&gt;" in page   # the names are shown, as text


def test_html_holds_no_live_link_image_or_script_in_chromium(reports):
    from playwright.sync_api import sync_playwright

    _, html = reports
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page()
        requests, dialogs = [], []
        page.on("request", lambda r: requests.append(r.url))
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(html.as_uri())
        outward = page.eval_on_selector_all("a[href]", "links => links.map(a => a.getAttribute('href'))"
                                            ".filter(h => !h.startsWith('#'))")
        counts = {tag: page.locator(tag).count() for tag in ("img", "script", "iframe", "object", "embed")}
        text = page.inner_text("body")
        browser.close()
    assert outward == [] and counts == dict.fromkeys(counts, 0) and dialogs == []
    assert requests == [html.as_uri()]
    assert "](//e)" in text or "<script>" in text   # shown, as text
