"""Command line: a thin layer over analyze() and the renderers.

Exit status: 0 done, 1 a gate failed, 2 bad usage or unreadable input (one line on stderr), 3 internal error.
Set NSANALYZE_DEBUG=1 to see tracebacks of unexpected errors.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# No BLAS thread pool: nsanalyze multiplies no matrices, and OpenBLAS's server thread, started when numpy
# is imported, spins on the second core for about 0.1 s, the time the export's tables are read on it.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import click  # noqa: E402

from nsanalyze import __version__
from nsanalyze.errors import InputError

SEVERITY_CHOICES = ("high", "medium", "low", "info")


def _parse_settings(values: tuple[str, ...]) -> dict[str, float]:
    import math

    settings = {}
    for item in values:
        key, sep, value = item.partition("=")
        try:
            if not sep or not math.isfinite(float(value)):   # nan compares false: a gate that never fires
                raise ValueError
            settings[key.strip()] = float(value)
        except ValueError:
            raise click.BadParameter(f"{item!r}: expected CHECK.KEY=NUMBER (a finite number)",
                                     param_hint="--set") from None
    return settings


class FiniteFloat(click.ParamType):
    """A number that can be compared: nan and ±inf are refused (a gate on nan never fails); with
    `at_least`, numbers below it too (a regression gate of -5% fails every run, a faster one included)."""

    name = "number"

    def __init__(self, at_least: float | None = None):
        self.at_least = at_least

    def convert(self, value, param, ctx):
        import math

        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        if self.at_least is not None and number < self.at_least:
            self.fail(f"{value!r}: expected a finite number of at least {self.at_least:g}", param, ctx)
        return number


class _ReaderGone(Exception):
    """stdout's reader closed the pipe (`nsanalyze report x | head -1`): a BrokenPipeError carried past
    click, which ends such a run with status 1 where `git log | head` ends with 0."""


class _Commands(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            raise _ReaderGone from None


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nsanalyze")
def cli():
    """Reads saved Nsight Compute reports and Nsight Systems exports and says what holds the program back."""


@cli.command()
@click.argument("profiles", nargs=-1, required=True)
@click.option("-o", "--output", "outputs", multiple=True,
              help="report file: .html .pdf .md .json .sarif, or - for JSON on stdout (repeatable)")
@click.option("--set", "settings", multiple=True, metavar="CHECK.KEY=VALUE", help="override a check threshold")
@click.option("--skip-first-ns", type=click.IntRange(min=0), help="nsys: ignore the first N ns (warm-up)")
@click.option("--nvtx-range", help="nsys: analyze only the GPU work launched inside the NVTX ranges of this name")
@click.option("--window", "window", type=click.Choice(["steady", "capture"]),
              help="nsys: analyze the steady steps (start-up and warm-up left out; the default) or the whole capture")
@click.option("--fail-on", type=click.Choice(SEVERITY_CHOICES), help="exit 1 when a finding has this severity or worse")
@click.option("--skip", "skip", multiple=True, metavar="CHECK", help="never run this check: the report of a build without it (repeatable)")
@click.option("-k", "--kernel", metavar="NAME|regex:PATTERN",
              help="analyze only these kernels (function name or demangled signature; regex: searches either), as ncu's -k")
@click.option("--as-ranks", is_flag=True,
              help="several nsys exports or Kineto traces: merge them as the ranks of one run even where their files "
                   "do not say so (distributedInfo, captures at the same time)")
@click.option("--annotations", type=click.Choice(["github"]), help="also print CI annotations for findings with source lines")
@click.option("--path-map", "path_map", multiple=True, metavar="OLD=NEW",
              help="SARIF/annotations: replace the build prefix OLD of source paths with NEW (repeatable)")
def report(profiles, outputs, settings, skip_first_ns, nvtx_range, window, fail_on, skip, kernel, as_ranks,
           annotations, path_map):
    """Analyze PROFILES (.ncu-rep, nsys .sqlite, either as .xz/.gz) and write reports.

    Defaults for --set, --window, --fail-on and --skip come from [tool.nsanalyze] in the nearest
    pyproject.toml (from the working directory up); flags given here win."""
    from nsanalyze.analyze import Options, analyze
    from nsanalyze.config import apply_skip, check_skip, load_settings
    from nsanalyze.render import check_target, format_for, refuse_inputs, write_reports

    if path_map or "nsanalyze.render.sarif" in sys.modules:  # SARIF's modules only when asked for (or to reset them)
        from nsanalyze.render.locations import parse_path_map
        from nsanalyze.render.sarif import set_paths

        set_paths(parse_path_map(path_map))
    config = load_settings()
    check_skip(skip, "--skip")
    thresholds = {**config.thresholds, **_parse_settings(settings)}
    window = window or config.window or "steady"
    fail_on = fail_on or config.fail_on

    for target in outputs:
        format_for(target)  # reject unknown formats and unwritable targets before the work
        check_target(target)
    refuse_inputs(outputs, profiles, "the input profiles")
    skipped = (*config.skip, *skip)
    model = analyze(list(profiles), Options(thresholds, skip_first_ns, nvtx_range, window, kernel, as_ranks,
                                            frozenset(skipped)))
    apply_skip(model, skipped)
    model = _as_utf8(model, profiles)
    write_reports(model, outputs)
    if not outputs:
        from nsanalyze.render.terminal import print_summary

        print_summary(model)
    elif all(t != "-" for t in outputs):
        click.echo(f"wrote {_one_line(', '.join(outputs))}", err=True)
    if annotations == "github":
        from nsanalyze.render.sarif import github_annotations

        for line in github_annotations(model):
            click.echo(line)
    if fail_on:
        from nsanalyze.render.scope import gate_lines

        tripped = gate_lines(model, SEVERITY_CHOICES, fail_on)
        for line in tripped:   # CI says why it failed: each finding that tripped the gate, one line
            click.echo(f"nsanalyze: --fail-on {fail_on}: {line}", err=True)
        if tripped:
            sys.exit(1)


@cli.command(name="diff")
@click.argument("base")
@click.argument("new")
@click.option("-o", "--output", "outputs", multiple=True, help="report file: .html .md .json, or - for JSON on stdout")
@click.option("--fail-on-regression", type=FiniteFloat(at_least=0), metavar="PCT", help="exit 1 when a kernel or range is PCT% slower")
@click.option("--force", is_flag=True, help="compare profiles of different kinds or GPUs anyway")
@click.option("-k", "--kernel", metavar="NAME|regex:PATTERN",
              help="analyze only these kernels (function name or demangled signature; regex: searches either), as ncu's -k")
def diff_command(base, new, outputs, fail_on_regression, force, kernel):
    """Compare two profiles of the same program: per kernel and NVTX range, before, after, and why."""
    from nsanalyze.diff import diff, regressions
    from nsanalyze.render import check_target, format_for, refuse_inputs, write_reports

    for target in outputs:
        format_for(target, "diff")   # a format diff has no renderer for is refused before the work
        check_target(target)
    refuse_inputs(outputs, (base, new), "the profiles compared")
    from nsanalyze.analyze import Options
    from nsanalyze.config import load_settings

    config = load_settings()
    result = diff(base, new, Options(dict(config.thresholds), window=config.window or "steady", kernel=kernel),
                  force=force)
    result = _as_utf8(result, (base, new))
    write_reports(result, outputs, "diff")
    if not outputs:
        from nsanalyze.render.terminal import print_diff

        print_diff(result)
    if fail_on_regression is not None:
        slower = regressions(result, fail_on_regression)
        for row in slower:
            click.echo(f"regression: {_one_line(row['name'])} {row['change']:+.1%} (noise band {row['noise']:.0%})", err=True)
        if slower:
            sys.exit(1)


@cli.command(name="whatif")
@click.argument("profiles", nargs=-1, required=True)
@click.option("--speedup", "speedups", multiple=True, metavar="regex:PATTERN=FACTOR",
              help="kernels whose name matches PATTERN run FACTOR times faster (2: twice as fast; repeatable)")
@click.option("--remove", "remove", multiple=True, metavar="CLASS",
              help="drop the host calls of a host-activity class (allocator, sync, launch, ...; an OS class such as "
                   "lock-wait: the host's waits in it between CUDA calls; repeatable)")
@click.option("--graph", is_flag=True, help="each step's launches replaced by CUDA graph launches: one a step, or one a stretch "
              "between the step's waits (a graph cannot capture a wait)")
@click.option("--outliers", is_flag=True, help="steps that stand out set to the median step")
@click.option("--pinned", is_flag=True, help="pageable copies at the capture's pinned-memory rate")
@click.option("--fuse", "fuse", multiple=True, metavar="ROLE",
              help="the kernels of a role (optimizer, elementwise, ...; loop: the steps' loops of launches, every "
                   "group; loop:N: one group, as launch-loop's finding names it) launched as one fused pass: their "
                   "launch paths gone, their GPU time kept (repeatable)")
@click.option("--untune", is_flag=True, help="an autotuner's timed trials gone (cuDNN benchmark mode, Triton's "
                                             "autotuner): their calls, kernels and the host's time between them")
@click.option("--untime", is_flag=True, help="the program's own timing code gone (CUDA event pairs around its work, "
                                             "each synchronized): its event calls, syncs and the host's time on "
                                             "their way")
@click.option("--unbuild", is_flag=True, help="no GPU code built in the steps (a kernel compiled and loaded for each "
                                              "new shape): the loads gone with the host's time building it before "
                                              "each")
@click.option("--uncheck", is_flag=True, help="the checks of values gone (a boolean read back and tested each time: "
                                              "argument validation, anomaly detection, asserts): each one-byte "
                                              "read, the kernels that made it, its wait and the host's way to "
                                              "their calls")
@click.option("--data-on-gpu", is_flag=True, help="the data the host handles for the steps kept on the GPU: "
                                                  "each copy to the device gone with its call, its wait and the "
                                                  "host's work before it, each read to the host of 64 KiB or more "
                                                  "with the host's work after it (the GPU work that replaces the "
                                                  "host's is not counted)")
@click.option("--uncapture", is_flag=True, help="each CUDA graph captured once, not in every step: the captures' "
                                                "calls with the host's code recording the graph between them, and "
                                                "the instantiations and destructions, gone (the graph's launch and "
                                                "kernels kept)")
@click.option("--unannotate", is_flag=True, help="PyTorch's operator NVTX ranges gone (emit_nvtx, nsys's "
                                                  "--pytorch=autograd-shapes-nvtx): each range's host time, the "
                                                  "median between an operator's range and the first one nested in "
                                                  "it, taken from the host compute before the next CUDA call")
@click.option("-o", "--output", "outputs", multiple=True, help="JSON file, or - for JSON on stdout")
@click.option("--skip-first-ns", type=click.IntRange(min=0), help="nsys: ignore the first N ns (warm-up)")
@click.option("--nvtx-range", help="nsys: analyze only the GPU work launched inside the NVTX ranges of this name")
@click.option("--window", "window", type=click.Choice(["steady", "capture"]),
              help="nsys: the steady steps (the default) or the whole capture")
def whatif_command(profiles, speedups, remove, graph, outliers, pinned, fuse, untune, untime, unbuild, uncheck,
                   data_on_gpu, uncapture, unannotate, outputs, skip_first_ns, nvtx_range, window):
    """What a change would buy: the steps replayed with it (their dependency graph re-timed), against
    the same replay without it, which must reproduce the measured steps within 2%."""
    from nsanalyze.analyze import Options
    from nsanalyze.config import load_settings
    from nsanalyze.render import check_target, format_for, refuse_inputs, write_reports
    from nsanalyze.render.whatif_report import summary_line
    from nsanalyze.whatif import WhatIf, check_roles, label, parse_changes, whatif

    parse_changes(speedups, remove)   # a bad option is refused before any work
    check_roles(fuse)
    for target in outputs:
        format_for(target, "whatif")
        check_target(target)
    refuse_inputs(outputs, profiles, "the input profiles")
    config = load_settings()
    results = whatif(list(profiles), Options(dict(config.thresholds), skip_first_ns, nvtx_range,
                                             window or config.window or "steady"),
                     WhatIf(tuple(speedups), tuple(remove), graph, outliers, pinned, tuple(fuse), untune, untime,
                            unbuild, uncheck, data_on_gpu, uncapture, unannotate))
    write_reports(results, outputs, "whatif")
    for result in results:
        line = summary_line(result, label(result))
        click.echo(line, err=bool(outputs) and "-" in outputs)


@cli.command(name="batch")
@click.argument("paths", nargs=-1, required=True)
@click.option("--db", "db_path", required=True, help="history database (SQLite), created on first use")
@click.option("--jobs", type=click.IntRange(min=1), help="worker processes (default: every core given to us)")
@click.option("--label", help="a label stored with every run (e.g. a branch or a benchmark name)")
@click.option("--git-revision", help="the revision the profiles were taken at")
@click.option("--scheduler", metavar="ADDRESS", help="run on an existing Dask cluster (tcp://host:8786)")
def batch_command(paths, db_path, jobs, label, git_revision, scheduler):
    """Analyze every profile under PATHS into a history database, skipping those already stored."""
    from rich.progress import Progress

    from nsanalyze.batch import batch, default_jobs, find_profiles, own_files, special_files

    if scheduler:
        import importlib.util

        if importlib.util.find_spec("distributed") is None:
            raise InputError("--scheduler", "needs Dask, an optional part: pip install 'nsanalyze[dask]'")
    total = len(find_profiles(list(paths), exclude=own_files(db_path))) + len(special_files(list(paths)))
    with Progress(transient=not sys.stderr.isatty()) as progress:
        task = progress.add_task("analyzing", total=total)
        outcomes = batch(list(paths), db_path, jobs or default_jobs(), label, git_revision, scheduler,
                         progress=lambda outcome: progress.advance(task))
    counts = {status: sum(o.status == status for o in outcomes) for status in ("stored", "skipped", "failed")}
    click.echo(f"{counts['stored']} stored, {counts['skipped']} already there, {counts['failed']} failed", err=True)
    for outcome in outcomes:
        if outcome.status == "failed":
            click.echo(f"nsanalyze: {_one_line(outcome.path)}: {_one_line(outcome.detail)}", err=True)
    if not outcomes:   # nothing analysable: never a silent success
        click.echo(f"nsanalyze: {_one_line(', '.join(paths))}: no profile found (nsys .sqlite exports, .ncu-rep "
                   "reports, PyTorch profiler traces; .xz/.gz compressed or not): nothing stored", err=True)
        sys.exit(2)
    if counts["failed"] == len(outcomes):
        sys.exit(2)  # nothing could be read: bad input, not success


@cli.command(name="trend")
@click.option("--db", "db_path", required=True, help="history database written by `nsanalyze batch`")
@click.option("-o", "--output", "outputs", multiple=True, help="report file: .html .md .json, or - for JSON")
@click.option("--fail-on-regression", is_flag=True, help="exit 1 when the latest run of a kernel or range regressed")
def trend_command(db_path, outputs, fail_on_regression):
    """Per-kernel and per-range time across the runs in a history database, regressions marked."""
    from nsanalyze.render import check_target, format_for, refuse_inputs, write_reports
    from nsanalyze.trend import regressions_in_last_run, trend

    if not Path(db_path).is_file():
        raise InputError(db_path, "no such history database")
    for target in outputs:
        format_for(target, "trend")
        check_target(target)
    refuse_inputs(outputs, (db_path, f"{db_path}-wal", f"{db_path}-shm"), "the history database's files")
    result = trend(db_path)
    write_reports(result, outputs, "trend")
    if not outputs:
        from nsanalyze.render.terminal import print_trend

        print_trend(result)
    slower = regressions_in_last_run(result) if fail_on_regression else []
    for row in slower:   # the job fails: say what failed it, as diff --fail-on-regression does
        change = f" {row['change']:+.1%}" if row.get("change") is not None else ""
        click.echo(f"regression: {_one_line(row['name'])}{change} in the latest run", err=True)
    if slower:
        sys.exit(1)


@cli.command(name="stats")
@click.argument("export_path", metavar="EXPORT")
@click.option("--report", "reports", default=",".join(("cuda_api_sum", "cuda_gpu_kern_sum", "cuda_gpu_mem_time_sum",
                                                        "cuda_gpu_mem_size_sum", "nvtx_sum", "osrt_sum")),
              show_default=True, help="comma-separated nsys stats reports")
@click.option("--format", "fmt", type=click.Choice(["csv", "json", "table"]),
              help="output format (default: from -o's extension, else a table on the terminal)")
@click.option("-o", "--output", help="file to write (.csv or .json; - for JSON on stdout); several CSV reports go to "
                                     "one file per report, FILE_REPORT.csv, as nsys stats names them")
@click.option("--window", type=click.Choice(["capture", "steady"]), default="capture", show_default=True,
              help="the whole capture (nsys stats' figures) or the steady steps `report` analyses")
def stats_command(export_path, reports, fmt, output, window):
    """The tables of `nsys stats` (CUDA API, GPU kernels, memcpy time and size, NVTX, OS runtime) from an export."""
    from nsanalyze import stats as nsstats
    from nsanalyze.read import read_profile
    from nsanalyze.render import check_target, refuse_inputs, write_bytes, write_many

    names = [name.strip() for name in reports.split(",") if name.strip()]
    unknown = [name for name in names if name not in nsstats.REPORTS]
    if unknown or not names:
        raise click.BadParameter(f"{', '.join(unknown) or reports!r}: known reports are {', '.join(nsstats.REPORTS)}",
                                 param_hint="--report")
    if fmt is None:
        suffix = Path(output).suffix.lower() if output and output != "-" else ""
        fmt = "json" if output == "-" else {".csv": "csv", ".json": "json"}.get(suffix, "table" if not output else None)
        if fmt is None:
            raise InputError(output, "stats files are .csv or .json (or give --format)")
    if fmt == "table" and output and output != "-":
        raise InputError(output, "a table is for the terminal; write .csv or .json")
    if output and output != "-":
        stem = output[:-4] if output.lower().endswith(".csv") else output
        several = fmt == "csv" and len(names) > 1
        targets = [f"{stem}_{name}.csv" for name in names] if several else [output]
        for target in targets:
            check_target(target)
        refuse_inputs(targets, (export_path,), "the inputs (the export)")
    export = read_profile(export_path)
    if getattr(export, "kind", None) not in ("nsys", "kineto"):
        raise InputError(export_path, "stats reads Nsight Systems exports (.sqlite), not Nsight Compute reports")
    chosen = nsstats.steady_window(export) if window == "steady" else None
    description = chosen.description if chosen else "the whole capture"
    tables = nsstats.stats(export, names, chosen)
    if fmt == "table":
        from nsanalyze.render.terminal import Console

        nsstats.print_tables(tables, export_path, description, Console())
    elif output and output != "-" and fmt == "csv" and len(names) > 1:
        stem = output[:-4] if output.lower().endswith(".csv") else output
        files = [(f"{stem}_{name}.csv", nsstats.to_csv(name, rows).encode()) for name, rows in tables.items()]
        write_many(files)
        written = [target for target, _ in files]
        click.echo(f"wrote {_one_line(', '.join(written))}", err=True)
    else:
        text = nsstats.render(tables, fmt, export_path, description)
        if output and output != "-":
            write_bytes(text.encode(), output)
            click.echo(f"wrote {_one_line(output)}", err=True)
        else:
            click.echo(text, nl=False)


@cli.command()
@click.argument("profile")
@click.option("-o", "--output", help="file to write: .csv, .parquet or .json (default: CSV on stdout)")
@click.option("-k", "--kernel", metavar="NAME|regex:PATTERN",
              help="analyze only these kernels (function name or demangled signature; regex: searches either), as ncu's -k")
def metrics(profile, output, kernel):
    """Write the normalized metrics table of PROFILE, one row per kernel launch."""
    from nsanalyze.metrics_export import metrics_frame, write_frame
    from nsanalyze.render import refuse_inputs

    refuse_inputs([output], (profile,), "the inputs (the profile)")
    frame = metrics_frame(profile, kernel)
    write_frame(frame, output)


@cli.command()
@click.option("--markdown", is_flag=True, help="print the full documentation of every check as Markdown")
@click.option("--set", "settings", multiple=True, metavar="CHECK.KEY=VALUE", help="show with this threshold overridden")
def checks(markdown, settings):
    """Document every check: id, what it reads, thresholds in effect here (pyproject.toml's
    [tool.nsanalyze] and --set applied) and advice."""
    from nsanalyze.render.checks_doc import checks_markdown

    if markdown:
        click.echo(checks_markdown())
        return
    from nsanalyze.checks import validate_overrides
    from nsanalyze.config import effective_summary, load_settings

    overrides = _parse_settings(settings)
    try:
        validate_overrides(overrides)
    except ValueError as exc:
        raise InputError("--set", str(exc)) from None
    click.echo(effective_summary(load_settings(), overrides))


def _save_traceback() -> str | None:
    """Writes the current exception's traceback to a file and returns its path (None if that fails)."""
    import tempfile
    import traceback

    try:
        fd, path = tempfile.mkstemp(prefix="nsanalyze-error-", suffix=".txt")
        with os.fdopen(fd, "w") as handle:
            traceback.print_exc(file=handle)
        return path
    except OSError:
        return None


def _quiet_stdout() -> None:
    """After a closed pipe (`nsanalyze ... | head -1`), send what is left to /dev/null, not an error."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass


def run() -> None:
    """The `nsanalyze` command's process: main(), then the process ends at once, its outputs and standard
    streams flushed and the atexit handlers run, without the interpreter's teardown of its 400 modules
    and their objects (60 ms of CPU at the end of every report, a twentieth of a 300k-kernel one)."""
    _reuse_freed_memory()
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code
    if code is not None and not isinstance(code, int):   # as Python's own exit: the text, status 1
        print(code, file=sys.stderr)
        code = 1
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # a closed pipe or stream: nothing more can reach it
            pass
    os._exit(code or 0)


def _reuse_freed_memory() -> None:
    """glibc gives each freed block above its mmap threshold (128 KB at first, raised as such blocks are
    freed, up to 32 MB) back to the kernel, and the next array of that size faults its pages in again:
    28,000 page faults, 0.1 s of CPU in a 300k-kernel report. Set from the start to where glibc's own
    adjustment ends (blocks up to 32 MB from the heap, up to 64 MB of free heap kept): half the faults,
    12 MB more at the peak there. Nothing off glibc."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    mallopt(m_mmap_threshold, 32 << 20)
    mallopt(m_trim_threshold, 64 << 20)


def main(argv=None):
    """Exit status: 0 done (or the reader closed the pipe), 1 a gate failed, 2 bad input or usage,
    3 an internal error (its traceback saved to a file named on stderr), 130 interrupted, 143 terminated."""
    import signal

    def terminated(signum, frame):  # SIGTERM unwinds like an exception: partial files are removed
        click.echo("nsanalyze: terminated", err=True)
        sys.exit(143)

    signal.signal(signal.SIGTERM, terminated)
    from nsanalyze.errors import INTERRUPTED

    INTERRUPTED.clear()

    def interrupt(signum, frame):   # as Python's own handler, and remembered: see errors.INTERRUPTED
        INTERRUPTED.set()
        raise KeyboardInterrupt

    interrupt.nsanalyze = True
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.default_int_handler or getattr(previous, "nsanalyze", False):   # not where SIGINT
        signal.signal(signal.SIGINT, interrupt)                                         # is ignored (nohup, &)
    try:
        _main(argv, INTERRUPTED)
    finally:   # main() run in a process that goes on (tests, notebooks): its handler as it was, and no
        if signal.getsignal(signal.SIGINT) is interrupt:   # Ctrl-C of this run left for the next to see
            signal.signal(signal.SIGINT, previous)
        INTERRUPTED.clear()


def _main(argv, INTERRUPTED) -> None:
    for stream in (sys.stdout, sys.stderr):   # LC_ALL=C: an ASCII terminal shows "µ" as \xb5, not a crash
        try:
            "µ…×→".encode(stream.encoding or "ascii")
        except (UnicodeEncodeError, LookupError):
            try:
                stream.reconfigure(errors="backslashreplace")
            except (AttributeError, ValueError):
                pass
    try:
        os.getcwd()
        cwd_gone = False
    except OSError:   # the working directory was deleted: absolute paths still work, relative ones cannot
        cwd_gone = True
    try:
        cli.main(args=argv, prog_name="nsanalyze", standalone_mode=False)
        if INTERRUPTED.is_set():   # a Ctrl-C swallowed on the way: the run did not end as asked
            raise KeyboardInterrupt
    except InputError as exc:
        gone = ("; the working directory no longer exists (deleted?): give absolute paths or run it from an "
                "existing folder") if cwd_gone and exc.path and not os.path.isabs(str(exc.path)) else ""
        click.echo(f"nsanalyze: {_one_line(exc.path)}: {_one_line(exc.reason)}{gone}", err=True)
        sys.exit(2)
    except click.exceptions.Abort:
        click.echo("nsanalyze: interrupted", err=True)
        sys.exit(130)
    except click.exceptions.NoArgsIsHelpError as exc:   # `nsanalyze` alone: the help, as before
        exc.show()
        sys.exit(2)
    except click.UsageError as exc:   # one line, like every other bad input
        command = exc.ctx.command_path if exc.ctx is not None else "nsanalyze"
        click.echo(f"nsanalyze: {_one_line(exc.format_message())} (see {command} --help)", err=True)
        sys.exit(2)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2)
    except (BrokenPipeError, _ReaderGone):
        _quiet_stdout()
        sys.exit(0)
    except PermissionError as exc:   # a file in a folder the user cannot enter, wherever it was first touched
        click.echo(f"nsanalyze: {_one_line(exc.filename or '.')}: permission denied", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        click.echo("nsanalyze: interrupted", err=True)
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as exc:  # a bug or an unforeseen input shape: one line, the traceback in a file
        if os.environ.get("NSANALYZE_DEBUG"):
            raise
        saved = _save_traceback()
        click.echo(f"nsanalyze: internal error ({exc.__class__.__name__}: {_one_line(exc)})"
                   + (f"; traceback saved to {saved}" if saved else "; rerun with NSANALYZE_DEBUG=1"), err=True)
        sys.exit(3)


def _as_utf8(model: dict, paths) -> dict:
    """Paths given in a locale that could not decode them (LC_ALL=C) hold surrogates (Python keeps each
    undecodable byte as one): the report shows them as the UTF-8 they were, or as \\xNN escapes, since no
    UTF-8 file can hold a surrogate. Only then is the model walked; names read from profiles are text."""
    from nsanalyze.text import decoded_all, has_surrogates

    return decoded_all(model) if any(has_surrogates(p) for p in paths) else model


def _one_line(text) -> str:
    """Paths and reasons with newlines or control characters still make one line on stderr."""
    from nsanalyze.render.format import visible

    return visible(str(text))
