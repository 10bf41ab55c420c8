"""The host handles each step's data: it builds what it uploads, or works on what it reads back, while the GPU waits.

## What it detects
The data the replayed steps around the median step move between host and GPU (normalize.critical_path.data_handled):
each copy to the device, with the host's work before its call (a batch gathered in NumPy, text tokenized, a mask
built), and each copy to the host of 64 KiB or more, with the host's work after it (logits sampled in NumPy, outputs
reduced, gradients applied to tables on the CPU). The check speaks where the host's own work on that data (beyond a
typical launch path, and beside its OS waits: a loader's queue is host-wait's) is 30% or more of what the change
takes away, and the replay of the steps with the data kept on the GPU saves 5% of the window or more. Less work
than that, the copies and their waits hold the time: pageable-memcpy and transfer-bound speak of them, unless the
steps read back ten times the bytes they upload or more and the host works on them for less time than their copies
take: state copied out each step (a snapshot of the weights), whose reads the change takes away; or they read back
about the bytes they upload, in 8 copies or more each way, with as little work on either side: state parked on the
host and brought back (a model moved to the CPU while another runs; blind79_offload, 175 MB each way a step).

## Why it is slow
Work the host does on a step's data lies on the step's critical path twice over: the GPU waits while the host
builds the input (its queue is empty after the upload's wait), and a read back waits for the GPU to finish before
the host can start on it. The copies themselves, from pageable memory, block the host too.

## Example
```python
idx = rng.integers(0, N, B)                       # a replay buffer in NumPy
obs = torch.from_numpy(buffer_obs[idx]).to("cuda")   # gathered on the host, uploaded each step
```

## Instead
```python
buffer_obs = torch.from_numpy(buffer_obs).to("cuda")          # once, before the loop
idx = torch.randint(0, N, (B,), device="cuda")
obs = buffer_obs[idx]                                         # gathered on the GPU
```

## Known problems
The replay takes the host's whole work before each upload (and after each read) away, and counts nothing for the
GPU work that replaces it (a gather, a sampling kernel): a few kernels, short beside the host's work, but where the
host's work cannot move to the GPU (a tokenizer, a simulator), the change that applies is building the data ahead
(DataLoader workers, pinned memory with `non_blocking=True`), which saves up to this much while the host keeps up.
Uploads of the same data each step (a constant moved inside the loop) are pageable-memcpy's first.

## Options
- `min_work_share`: the host's work on the data, of what keeping it on the GPU takes away.
- `min_window_share`: the saving's share of the window.
"""

from humanize import naturalsize

from nsanalyze.checks.base import Check, Finding, Threshold, evidence, plural, step_count
from nsanalyze.checks.program.autotuning import host_cause_saving
from nsanalyze.normalize.critical_path import READ_BACK_MIN_BYTES
from nsanalyze.normalize.steps import normalize_name
from nsanalyze.numbers import duration_text
from nsanalyze.text import code_span

ID = "host-data"
ADVICE_TEXT = """Keep the steps' data on the GPU, or have it ready before the step needs it.

- Data that fits in GPU memory (a dataset, a replay buffer, an embedding table, the corpus's token ids): move it to
  the GPU once, before the loop, and select each batch there (indices from `torch.randint(..., device="cuda")`,
  indexing on the GPU).
- Work on a step's outputs (sampling, argmax, metrics, a confusion matrix): do it on the GPU
  (`torch.multinomial`, `out.argmax(1)`, `torch.bincount`, `topk`) and copy back the small result, or nothing.
- State updated each step (embedding tables, an optimizer): keep it on the GPU, not on the CPU with its gradients
  read back.
- Outputs the host must have (predictions to return, values to log): copy them with `non_blocking=True` into pinned
  buffers and work on the previous step's outputs while the GPU computes this step, so that no step waits for its
  own.
- Input that must be made on the host (decoding, tokenizing, a simulator): make it ahead, in DataLoader workers
  (`num_workers`, `pin_memory=True`, `persistent_workers=True`), and copy it with `non_blocking=True`, so that the
  next batch is ready while the GPU computes this one.

"""
UPLOADS_EXAMPLE = """```python
# before: the batch gathered on the host, uploaded from pageable memory each step
obs = torch.from_numpy(buffer_obs[rng.integers(0, N, B)]).to("cuda")
# after: the buffer on the GPU once, the batch gathered there
buffer_obs = torch.from_numpy(buffer_obs).to("cuda")
obs = buffer_obs[torch.randint(0, N, (B,), device="cuda")]
```"""
# the example by where the host's work lies (_lead's cases): a batch built on the host is the uploads' example; state
# copied out, and outputs worked on after their read, have their own (blind77_hostsnap, a snapshot of the weights with
# nothing uploaded, showed the gathered batch, a user read)
STATE_EXAMPLE = """```python
# before: a snapshot of the weights copied to the host each step
snapshot = {k: v.cpu() for k, v in model.state_dict().items()}
# after: buffers on the GPU allocated once, filled in place (or every N steps)
snapshot = {k: torch.empty_like(v) for k, v in model.state_dict().items()}
torch._foreach_copy_(list(snapshot.values()), list(model.state_dict().values()))
```"""
READS_EXAMPLE = """```python
# before: each step's predictions read back, then counted in Python
for p, y in zip(logits.argmax(-1).tolist(), labels.tolist()):
    confusion[y][p] += 1
# after: counted on the GPU, read every N steps
confusion += torch.bincount(labels * C + logits.argmax(-1), minlength=C * C).view(C, C)
```"""
# reads followed by files written each step (_lead's files case): the counting example missed a log or checkpoint
# written with fsync every step (blind79_fsynclog, a user read)
FILES_EXAMPLE = """```python
# before: a checkpoint and metrics written, and fsync'd, every step
torch.save(model.state_dict(), "ckpt.pt")
log.write(json.dumps(metrics) + "\\n"); log.flush(); os.fsync(log.fileno())
# after: every N steps and at the end, no fsync each time
if step % 500 == 0 or step == last:
    torch.save(model.state_dict(), "ckpt.pt")
log.write(json.dumps(metrics) + "\\n")
```"""
ADVICE = ADVICE_TEXT + UPLOADS_EXAMPLE

CHECK = Check(
    id=ID,
    name="program.host_data",
    title="The host builds the steps' inputs or works on their outputs while the GPU waits",
    section="busy",
    requires=(),
    optional=("host_data", "budget"),
    thresholds={
        "min_work_share": Threshold(0.3, "less host work on the data than this, of what keeping it on the GPU takes "
                                         "away, and the copies and their waits hold the time (pageable-memcpy's, "
                                         "transfer-bound's)"),
        "min_window_share": Threshold(0.05, "under 5% of the window the data's handling is noise beside the step"),
        "min_reads_over_uploads": Threshold(10.0, "a step that reads back this many times the bytes it uploads, with "
                                                  "less host work on them than min_work_share and than their copies "
                                                  "take, copies out state (a snapshot of the weights: "
                                                  "blind77_hostsnap's 278.4 MB a step, nothing uploaded), not the "
                                                  "outputs of what it took in"),
    },
    speedup_model=("the replay of the steps with the data kept on the GPU: each copy to the device gone with its "
                   "call, its wait and the host's work before it, each read of 64 KiB or more to the host gone with "
                   "the host's work after it (critical_path.data_handled); capped by the time those take"),
    change={"data_on_gpu": True},   # the replay change priced (normalize.pricing)
    advice=ADVICE,
)


# The longest stretch names its range where it is this share of the median step (of the window without steps) or
# more, and another of the longest ran in a range of that name: 15-65% on the exports whose host waits lie in ranges
# of their own (power_iteration's IO N, numba-jit's matmul); a 1.4 ms stretch of a 58 ms step of small ones (a Kineto
# trace's optimizer range) names no place where the time goes.
NAMED_RANGE_SHARE = 0.1


def own_range(timeline, stretches):
    """(the longest stretch, its range's name, how many of the stretches ran in a range of that name) where the
    longest ran inside an NVTX range of the program's own that is not a step (`IO 190` inside `Step 190 to 200`),
    long enough (NAMED_RANGE_SHARE) and with another of the longest in a range of that name; else None."""
    top = stretches[0] if stretches else None
    if top is None or not top.nvtx_range:
        return None
    if timeline.steps is not None and normalize_name(top.nvtx_range) == timeline.steps.name:
        return None
    whole = (timeline.steps.median_ns if timeline.steps is not None and timeline.steps.median_ns
             else timeline.summary.span_ns) or 0
    if top.own_time_ns < NAMED_RANGE_SHARE * whole:
        return None
    name = normalize_name(top.nvtx_range)
    alike = sum(1 for s in stretches if s.nvtx_range and normalize_name(s.nvtx_range) == name)
    # (one stretch in a range, time53_gpt's CUB UniqueByKey in one step of 442, is no place to start)
    return (top, name, alike) if alike >= 2 else None


def range_lead(timeline, stretches) -> str:
    """Where the host's longest stretch ran in a range of the program's own (own_range), the advice starts there: the
    range names the code to move, more than a generic list does (power_iteration's `IO N` writes the vector it read
    back to a file, which no GPU does for it)."""
    named = own_range(timeline, stretches)
    if named is None:
        return ""
    top, name, alike = named
    return (f"Start with the code inside the NVTX range {code_span(top.nvtx_path or top.nvtx_range)}: {alike} of the "
            f"host's {len(stretches)} longest stretches without GPU work ran in ranges named {code_span(name)}, the "
            f"longest ({duration_text(top.own_time_ns)}) in this one.\n\n")


def host_work_ns(data) -> float:
    """The host's work a step on the data: before the uploads and after the reads."""
    return data.work_before_uploads_ns_per_step + data.work_after_reads_ns_per_step


def copied_out(data, limits) -> bool:
    """The host works little on the data (under min_work_share of what the change takes away): where the check
    speaks then, it speaks for state copied out (state_read_back)."""
    return host_work_ns(data) < limits.min_work_share * data.ns_per_step


def handled(timeline, limits):
    """(the steps' data, what keeping it on the GPU saves over the window) where this check speaks, else None."""
    data = getattr(timeline, "host_data", None)
    steps = step_count(timeline) or 0
    if data is None or not steps or not timeline.summary.span_ns or not data.ns_per_step:
        return None
    if copied_out(data, limits) and not state_read_back(data, limits) and not round_trip(data):
        return None
    files = files_idle_ns_per_step(timeline, data)
    change = {**CHECK.change, **({"remove": (FILE_CLASS,)} if files else {})}
    saving = host_cause_saving(timeline, change, data.ns_per_step + files, data.step_ns, limits.min_window_share)
    return (data, saving) if saving is not None else None


def takes_files(timeline, limits) -> bool:
    """Whether this check's finding holds the files its steps write after the reads (files_idle_ns_per_step): host-wait
    then leaves that class to it (checks/program/_claims.classes_taken)."""
    found = handled(timeline, limits)
    return found is not None and bool(files_idle_ns_per_step(timeline, found[0]))


def state_read_back(data, limits) -> bool:
    """The steps read back min_reads_over_uploads times the bytes they upload or more, and the host works on them for
    less time than the copies take: state copied out each step, whose copies and waits the change takes away. Outputs
    the host works on take it longer than their copies (graph51_hostmetrics: 128 KiB of logits a step, 0.6-0.9 ms of
    metrics computed on them in NumPy)."""
    return bool(data.reads_per_step) and \
        data.read_bytes_per_step >= limits.min_reads_over_uploads * data.upload_bytes_per_step and \
        data.work_after_reads_ns_per_step < data.copy_ns_per_step


# Reads back and uploads of bytes within this factor of each other, each step, in ROUND_TRIP_COPIES copies or more
# each way, are one state's round trip: many tensors parked on the host and brought back (blind79_offload: a service
# that moves its idle model to the CPU and the next one back per request, 175.1 MB read back and 175.3 MB uploaded a
# step, in 38 and 114 copies). A batch in and its result out are a few buffers (pinned_churn.cu: one 64 MiB copy
# each way a step, the host writing the input): data the program processes, the copy checks' to price.
ROUND_TRIP_FACTOR = 1.25
ROUND_TRIP_COPIES = 8


def round_trip(data) -> bool:
    """The steps read back about the bytes they upload (ROUND_TRIP_FACTOR), in many copies each way
    (ROUND_TRIP_COPIES), and the host works on them for less time than their copies take on either side: state
    parked on the host and brought back, whose copies and waits the change takes away."""
    up, down = data.upload_bytes_per_step, data.read_bytes_per_step
    return min(data.reads_per_step, data.uploads_per_step) >= ROUND_TRIP_COPIES and bool(up and down) and \
        max(up, down) <= ROUND_TRIP_FACTOR * min(up, down) and \
        data.work_after_reads_ns_per_step < data.copy_ns_per_step and \
        data.work_before_uploads_ns_per_step < data.copy_ns_per_step


# Budget parts in the order the change's saving is claimed from, after the copies' own GPU time: the host's work
# first (the GPU idle while it builds or reads), then the waits and the launch queue they drain
IDLE_ORDER = ("idle_host", "idle_sync", "idle_launch", "idle_other")


def claimed_parts(timeline, limits, taken: dict[str, float]) -> dict[str, float]:
    """What this check's finding claims of the budget's parts, within what the causes before it leave (`taken`): the
    copies' GPU time from gpu_copy, the rest of its saving from the idle parts, the host's first."""
    found = handled(timeline, limits)
    if found is None or not timeline.budget:
        return {}
    data, saving = found
    parts = {p.part: p.ns for p in timeline.budget}

    def left(part: str) -> float:
        return max(0.0, parts.get(part, 0.0) - taken.get(part, 0.0))
    claims = {"gpu_copy": min(left("gpu_copy"), data.copy_ns_per_step * timeline.steps.count, saving)}
    rest = saving - claims["gpu_copy"]
    for part in IDLE_ORDER:
        take = min(rest, left(part))
        claims[part] = take
        rest -= take
    return {part: ns for part, ns in claims.items() if ns > 0}


def change_of(data, files: bool = False) -> dict:
    """The change this finding stands for; with `files` (files_idle_ns_per_step), the file I/O gone with the reads;
    where the pageable copies are the data's (critical_path.pageable_within), pinning them (pageable-memcpy's change)
    is part of it, and where the syncs are their waits (critical_path.syncs_within), removing the syncs (host-sync's)
    is (normalize.pricing.contains)."""
    return {**CHECK.change, **({"remove": (FILE_CLASS,)} if files else {}),
            **({"pageable_within": True} if data.pageable_within else {}),
            **({"syncs_within": True} if data.syncs_within else {})}


# The host's work on one side (before the uploads, after the reads) under this share of what the change takes away is
# not said beside it: "after 0 ns of its work"
SAID_WORK_SHARE = 0.05


def _what(data) -> str:
    """The data a step moves and the host's work on it, as the title says it: the side where the work lies first."""
    uploads, reads = "", ""
    if data.uploads_per_step:
        work = data.work_before_uploads_ns_per_step
        uploads = (f"{_count(data.uploads_per_step, 'upload')}{{a_step}} "
                   f"({naturalsize(data.upload_bytes_per_step)})"
                   + (f" after {duration_text(work)} of its work on them" if work >= SAID_WORK_SHARE * data.ns_per_step
                      else ""))
    if data.reads_per_step:
        work = data.work_after_reads_ns_per_step
        # (copies to the host of READ_BACK_MIN_BYTES or more: blind79_offload's 38.5 a step beside 75.5 of 1.5 KiB
        # read as all of its 114, a user read)
        least = naturalsize(READ_BACK_MIN_BYTES, binary=True, format="%.0f")
        reads = (f"{_count(data.reads_per_step, 'read')} back of {least} or more{{a_step}} "
                 f"({naturalsize(data.read_bytes_per_step)})"
                 + (f" followed by {duration_text(work)} of its work on them"
                    if work >= SAID_WORK_SHARE * data.ns_per_step else ""))
    said = [reads, uploads] if data.work_after_reads_ns_per_step > data.work_before_uploads_ns_per_step else \
        [uploads, reads]
    said = [text for text in said if text]
    return ", and ".join([said[0].format(a_step=" a step"), *(text.format(a_step="") for text in said[1:])])


# The launching thread's file I/O (host_activity.csv's file-io class) at this share or more of the host's work after
# the reads, a step: the data read back is written out (blind79_fsynclog: a 7.1 MB checkpoint saved and fsync'd
# after every step, 6.9 ms of work after the reads and 8.5 ms of GPU idle in fsync and write a step)
# Such files are what the reads were for (a checkpoint: torch.save of CUDA tensors reads them back, then writes
# them): the change that takes the reads out of the steps (every N steps) takes the writes with them, so the finding
# holds both, and host-wait leaves the class to it (blind79_fsynclog: host-data 14.0 ms a step and host-wait 8.5 for
# one cause, whose fix saved 22.1 and 21.3)
FILE_WRITES_SHARE = 0.5
FILE_CLASS = "file-io"


def files_idle_ns_per_step(timeline, data) -> float:
    """The GPU idle a step under the launching thread's file I/O (host_activity.csv's file-io class) where that is
    FILE_WRITES_SHARE of the host's work after the reads or more; else 0."""
    activity = getattr(timeline, "host_activity", None)
    entry = activity.by_class(FILE_CLASS) if activity is not None else None
    steps = step_count(timeline) or 0
    if entry is None or not steps or not data.work_after_reads_ns_per_step or \
            entry.idle_ns / steps < FILE_WRITES_SHARE * data.work_after_reads_ns_per_step:
        return 0.0
    return entry.idle_ns / steps


def _file_writes(timeline, data) -> str:
    """`fsync, write, open64 (8.48 ms of GPU idle a step)` where the steps write files after the reads
    (files_idle_ns_per_step); else ''."""
    idle = files_idle_ns_per_step(timeline, data)
    if not idle:
        return ""
    entry = timeline.host_activity.by_class(FILE_CLASS)
    names = ", ".join(name for name, _, _ in entry.top_calls[:3])
    return f"{names} ({duration_text(idle)} of GPU idle a step)"


def _count(per_step: float, noun: str) -> str:
    """`5 uploads`, `0.5 reads`: a count a step, whole where it is."""
    return plural(round(per_step), noun) if abs(per_step - round(per_step)) < 0.05 else f"{per_step:.1f} {noun}s"


def _lead(data, state: bool = False, files: str = "") -> str:
    """The advice's first line: the side where the host's work lies, or, for state copied out (state_read_back), or
    parked on the host and brought back (round_trip), that; where the reads are followed by files written (`files`:
    the calls, from _file_writes), those."""
    if state and round_trip(data):
        return (f"Each step copies {naturalsize(data.read_bytes_per_step)} to the host and "
                f"{naturalsize(data.upload_bytes_per_step)} back, and the host does little with them: "
                "state parked on the host between uses (a model moved to the CPU while another runs, optimizer state "
                "or a cache offloaded), not values it works on. Keep it on the GPU where memory allows (both models "
                "resident; `model.to(\"cpu\")` in the loop moves every weight each time); where it must leave, "
                "keep its host copy in pinned memory allocated once and bring it back with `non_blocking=True` on a "
                "side stream ahead of its use.\n\n")
    if state:
        return (f"Each step copies {naturalsize(data.read_bytes_per_step)} to the host and the host does "
                "little with it within the step: state copied out (a snapshot of the weights, a checkpoint, "
                "activations or outputs kept for later), not values it works on. Keep it on the GPU (a copy into "
                "buffers allocated once: `torch._foreach_copy_(buffers, tensors)`), copy it every N steps, or, where "
                "the host must have it, with `non_blocking=True` into pinned buffers on a side stream, read a step "
                "later.\n\n")
    if data.work_after_reads_ns_per_step > data.work_before_uploads_ns_per_step and files:
        return (f"Each step reads back {naturalsize(data.read_bytes_per_step)} and writes files: "
                f"{files}. That is a checkpoint or a log written every step: write it every N steps (and at the end), "
                "without an fsync each time; where every step's must be kept, copy it into pinned buffers with "
                "`non_blocking=True` and write from a thread of its own.\n\n")
    if data.work_after_reads_ns_per_step > data.work_before_uploads_ns_per_step:
        return ("Most of the host's work follows the reads back: it waits for the GPU's outputs, then works on them "
                "while nothing is queued. Do that work on the GPU and read back the small result; what only the host "
                "can do (a file written, a record logged) goes to a thread of its own, after a non-blocking copy "
                "into pinned memory.\n\n")
    return ("Most of the host's work comes before the uploads: it builds each step's input on the CPU while the GPU "
            "waits for it. Keep the data on the GPU, or build it ahead of the step.\n\n")


def _advice(data, state: bool, files: str = "") -> str:
    """The advice with the example for the side where the host's work lies (as _lead's cases)."""
    if state and not round_trip(data):
        return ADVICE_TEXT + STATE_EXAMPLE
    if not state and data.work_after_reads_ns_per_step > data.work_before_uploads_ns_per_step:
        return ADVICE_TEXT + (FILES_EXAMPLE if files else READS_EXAMPLE)
    return ADVICE


def run(timeline, limits) -> Finding | None:
    found = handled(timeline, limits)
    if found is None:
        return None
    data, saving = found
    steps, span = timeline.steps.count, timeline.summary.span_ns
    work = host_work_ns(data)
    named = own_range(timeline, timeline.host_stretches[:5])   # (the program's own name for the code, said first)
    where = (f"; longest stretch {named[0].own_time_ns / 1e6:.1f} ms in range "
             f"'{named[0].nvtx_path or named[0].nvtx_range}'" if named else "")
    state = copied_out(data, limits)   # (handled: then state_read_back)
    trip = state and round_trip(data)
    said = (f"The steps move state to the host and back that the host does little with: {_what(data)}" if trip else
            f"The steps copy state to the host that the host does little with: {_what(data)}"
            + (f", {data.read_bytes_per_step / data.upload_bytes_per_step:,.0f}x the bytes they upload"
               if data.upload_bytes_per_step else ", nothing uploaded") if state else
            f"The GPU waits while the host handles each step's data: {_what(data)}")
    files = _file_writes(timeline, data)
    kept = "the data kept on the GPU and its files written every N steps" if files else "the data kept on the GPU"
    finding = Finding(
        check=ID,
        title=(f"{said}; with {kept} a step saves {duration_text(saving / steps)} of its "
               f"{duration_text(timeline.steps.mean_ns)} mean{where}"),
        estimated_speedup=min(1.0, saving / span),
        evidence={"work_share": evidence(work / data.ns_per_step, limits.min_work_share, unit="ratio", compare=">="),
                  "window_share": evidence(min(1.0, saving / span), limits.min_window_share, unit="ratio",
                                           compare=">="),
                  "uploads_per_step": evidence(data.uploads_per_step),
                  "upload_bytes_per_step": evidence(data.upload_bytes_per_step, unit="byte"),
                  "reads_per_step": evidence(data.reads_per_step),
                  "read_bytes_per_step": evidence(data.read_bytes_per_step, unit="byte"),
                  "work_before_uploads_ns_per_step": evidence(data.work_before_uploads_ns_per_step, unit="ns"),
                  "work_after_reads_ns_per_step": evidence(data.work_after_reads_ns_per_step, unit="ns"),
                  "copy_ns_per_step": evidence(data.copy_ns_per_step, unit="ns"),
                  **({"file_io_idle_ns_per_step": evidence(files_idle_ns_per_step(timeline, data), unit="ns")}
                     if files else {})},
        advice=range_lead(timeline, timeline.host_stretches[:5]) + _lead(data, state, files) + _advice(data, state, files),
    )
    finding.change = change_of(data, bool(files))
    finding.estimated_savings_ns = saving
    return finding
