"""The HTML report in headless Chromium (Debian's package, driven by Playwright): no console errors,
no network requests, findings and plots present, program text escaped."""


from nsanalyze.render import write_report

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def open_in_chromium(path, screenshot):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        requests, console, dialogs = [], [], []
        page.on("request", lambda r: requests.append(r.url))
        page.on("console", lambda m: console.append((m.type, m.text)))
        page.on("pageerror", lambda e: console.append(("pageerror", str(e))))
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(path.as_uri())
        page.screenshot(path=str(screenshot), full_page=True)
        facts = {"findings": page.locator("article.finding").count(), "svgs": page.locator("figure svg").count(),
                 "scripts": page.locator("script").count(), "imgs": page.locator("img").count(),
                 "first_row": page.locator("table.findings tbody tr").first.inner_text(),
                 "text": page.inner_text("body")}
        browser.close()
    return requests, console, dialogs, facts


def test_dev_suite_report_in_chromium(joined_model, tmp_path):
    path = tmp_path / "report.html"
    write_report(joined_model, str(path))
    requests, console, dialogs, facts = open_in_chromium(path, tmp_path / "shot.png")
    assert requests == [path.as_uri()]                 # the file itself and nothing else
    assert not [c for c in console if c[0] in ("error", "pageerror")]
    assert facts["findings"] >= 10 and facts["svgs"] >= 3 and facts["scripts"] == 0
    assert "pageable-memcpy" in facts["first_row"]      # rank 1: the 9.5 ms pageable copy, 1.3 ms pinned
    assert "Is the GPU really busy?" in facts["text"] and "NVIDIA's rules: a second opinion" in facts["text"]
    assert (tmp_path / "shot.png").stat().st_size > 50_000


def test_hostile_names_render_as_text(hostile_model, tmp_path):
    path = tmp_path / "evil.html"
    write_report(hostile_model, str(path))
    html = path.read_text()
    assert "<script>alert" not in html and "<img src=x" not in html
    requests, console, dialogs, facts = open_in_chromium(path, tmp_path / "evil.png")
    assert dialogs == [] and facts["scripts"] == 0 and facts["imgs"] == 0
    assert "<img src=x onerror=alert(1)>" in facts["text"]      # shown, as text


def test_nsys_only_report_has_the_utilization_picture(infer_model, tmp_path):
    from nsanalyze.render.html import render

    html = render(infer_model)
    assert "GPU-Util (GR Active) against SM issue" in html
    assert "busy 2% of the time by GPU-Util" in html or "GPU busy" in html


def test_the_kernel_table_shows_counter_columns_only_with_counters(infer_model, joined_model):
    """An nsys export has no hardware counters: its kernel table left six columns empty (bound, SM SOL, memory SOL,
    DRAM, tensor pipe, occupancy; a user read). They are shown where a kernel has counters (the dev suite's ncu
    report joined with its export); else one line says where they come from."""
    import re

    from nsanalyze.render.html import render

    bare, joined = render(infer_model), render(joined_model)
    assert not any(k["metrics"].get("sm_throughput_pct") is not None for k in infer_model["kernels"])
    assert "<th>SM SOL</th>" not in bare and "No hardware counters for these kernels" in bare
    assert "<th>SM SOL</th>" in joined and "No hardware counters" not in joined
    row = re.search(r'<table class="kernels">.*?<tbody>\s*<tr>(.*?)</tr>', bare, re.S).group(1)
    assert row.count("<td") == 4   # kernel, time, launches, share


def test_titles_show_their_code_as_code_and_several_gpus_as_several(analyzed):
    """An expert's read of the HTML: nvtx-examples' workflow printed "`torch.cuda.empty_cache()`" with its backticks
    in the allocator finding's title; nsys-ai's 2-GPU capture said "the GPU was busy ... copies 1.86 s" over a 957 ms
    window (the copies of both GPUs and their streams, summed). Code spans are <code> (and nothing else of Markdown:
    a name's link syntax stays text), and the line names the GPUs and the sum."""
    import re

    from nsanalyze.render.html import render
    from tests.conftest import PUBLIC

    from tests.conftest import REAL

    workflow = render(analyzed(PUBLIC / "quasiben__nvtx-examples__workflow.sqlite.xz"))
    titles = re.findall(r'<p class="title">(.*?)</p>', workflow)
    assert titles and not [t for t in titles if "`" in t]
    # (workflow's allocator title names a pool since round 79, the program being CuPy's: a PyTorch loop's names the call)
    churn = render(analyzed(REAL / "alloc_churn_nsys.sqlite.xz"))
    titles = re.findall(r'<p class="title">(.*?)</p>', churn)
    assert not [t for t in titles if "`" in t]
    assert any("<code>torch.cuda.empty_cache()</code>" in t for t in titles)
    model = analyzed(PUBLIC / "GindaChen__nsys-ai__tests__fixtures__h100_2gpu_1s.sqlite.xz")
    assert len(model["timeline"]["devices"]) == 2
    two = render(model)
    assert "the 2 GPUs were busy" in two and "summed over the GPUs and their streams" in two
    assert "the GPU was busy" not in two
    # the export has no TARGET_INFO_GPU table: it is said so, not "unknown GPU, CC ?", nor "no GPU recorded" beside
    # its two GPUs' findings
    assert "GPU model not recorded in the profile" in two and "CC ?" not in two


def test_two_kernels_never_read_alike_in_the_findings_table(analyzed):
    """gpt_fp32_full's cuBLAS GEMMs differ in their tile size past the 48th character: the HTML cut both
    tilesize128x128x8 and tilesize128x64x8 to one text (the full name in a hover title alone). Cut names stay apart,
    as in the Markdown."""
    import re

    from nsanalyze.render.html import render
    from tests.conftest import REAL

    model = analyzed(REAL / "gpt_fp32_full.ncu-rep.xz")
    html = render(model)
    table = html[html.index('<table class="findings">'):html.index("</table>", html.index('<table class="findings">'))]
    cells = re.findall(r'<td title="([^"]*)">([^<]*)</td>', table)
    assert len({full for full, _ in cells}) >= 3
    shown = {}
    for full, visible in cells:
        shown.setdefault(visible, set()).add(full)
    assert [names for names in shown.values() if len(names) > 1] == []


def test_the_longest_waits_name_the_launching_threads_calls_first(analyzed):
    """blind68_loader's longest stretch (184 ms) listed `poll (367 ms)`: every thread's calls summed, longer than the
    stretch and not the GPU's wait (a user read). The launching thread's own calls come first with their time
    (thread_os_calls), no longer than the stretch; the other calls by name."""
    import re

    from nsanalyze.render.html import render
    from tests.conftest import REAL

    model = analyzed(REAL / "blind68_loader_base1_nsys.sqlite.xz")
    stretch = model["timeline"]["host_stretches"][0]
    assert sum(c["overlap_ns"] for c in stretch["os_calls"]) > stretch["duration_ns"]   # summed over threads
    own = stretch["thread_os_calls"]
    assert own and all(c["overlap_ns"] <= stretch["duration_ns"] for c in own)
    table = re.search(r'<table class="waits">.*?</table>', render(model), re.S).group(0)
    first = re.search(r"<tbody>\s*<tr>(.*?)</tr>", table, re.S).group(1)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", first, re.S)
    assert cells[3].strip().startswith(own[0]["name"]) and "poll" in cells[4] and "poll" not in cells[3]
