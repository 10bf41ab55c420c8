"""What wider causes claim of the time budget's parts, so that two findings never sell the same nanoseconds.

A finding of one budget part (launch-overhead, host-compute, gpu-idle, the copy checks' caps) prices
only what is left of its part after the causes that span parts have taken theirs: the allocator and pinned
allocation classes' idle time (checks/program/_host_class.py), pageable-memcpy's idle time under the calls that
staged pageable copies (beside its gpu_copy part), the excess of steps that stand out
(slow-steps), the time of a phase that is not the steps (non-step-phase), an autotuner's stretches of timed trials
(autotuning: the waits of its syncs are the tuning's), the GPU idle time in which the
launching threads waited on a queue, a lock, I/O or a sleep (host-wait), each with its check's defaults, then
the syncs' idle time with the launch wait their drained queue leaves (host-sync). Last, a part's own finding
that takes time beside its part: launch-overhead, where the replay of one graph launch a step saves more than
the whole launch wait (the host holds the step, and the GPU's work then runs under the host work that stays),
claims the rest from the idle_host the others leave, at most the GPU's busy time; host-compute counts what it
leaves.
"""

from __future__ import annotations

from nsanalyze.checks import check_by_id, limits_for, runs
from nsanalyze.checks.base import budget_part
from nsanalyze.checks.program import (allocator_churn, autotuning, event_timing, host_data, non_step_phase,
                                      pageable_memcpy, pinned_alloc_churn, runtime_compilation, slow_steps,
                                      graph_recapture)
from nsanalyze.checks.program._host_class import HOST_WAIT_ID, WAIT_MIN_SHARE, class_cost, wait_parts
from nsanalyze.normalize import pricing
from nsanalyze.normalize.host_activity import waits_for_gpu


def classes_taken(timeline) -> tuple:
    """The wait classes whose time a wider cause's finding holds, which host-wait then leaves to it: the files that
    host-data's steps write after their reads (host_data.takes_files: a checkpoint written every step)."""
    if getattr(timeline, "host_data", None) is None or not runs(host_data.ID):
        return ()
    return (host_data.FILE_CLASS,) if host_data.takes_files(timeline, limits_for(host_data)) else ()


def claims_by_cause(timeline) -> dict[str, dict[str, float]]:
    """Per wider cause (its check id), the ns of each budget part its finding claims: the allocator and
    pinned-allocation classes' idle time, the excess of steps that stand out (slow-steps), the time of a
    phase that is not the steps (non-step-phase), each with its check's default thresholds. A finding of
    one budget part then prices only what is left, so two findings never sell the same nanoseconds.
    A skipped cause (--skip) claims nothing: its finding is not there to count the time."""
    out: dict[str, dict[str, float]] = {}
    activity = getattr(timeline, "host_activity", None)
    if activity is not None:
        for check in (allocator_churn, pinned_alloc_churn):
            entry = activity.by_class(check.CLASS)
            if entry is not None and entry.idle_ns and runs(check.ID):
                out[check.ID] = _class_claim(timeline, entry, class_cost(timeline, check.CLASS))
        pageable = timeline.copies.pageable if getattr(timeline, "copies", None) is not None else None
        if pageable is not None and pageable.copies >= limits_for(pageable_memcpy).min_copies \
                and runs(pageable_memcpy.ID):   # the idle time under the calls that staged pageable copies
            out[pageable_memcpy.ID] = pageable_parts(timeline, _summed(out))
        if getattr(timeline, "step_starts", None) is not None and runs(slow_steps.ID):
            out[slow_steps.ID] = slow_steps.excess_by_part(timeline, limits_for(slow_steps))
    if getattr(timeline, "phases", None) and runs(non_step_phase.ID):
        out[non_step_phase.ID] = non_step_phase.claimed_parts(timeline, limits_for(non_step_phase))
    if getattr(timeline, "timed_trials", None) is not None and runs(autotuning.ID):   # the tuner's stretches
        out[autotuning.ID] = autotuning.claimed_parts(timeline, limits_for(autotuning), _summed(out))
    if getattr(timeline, "timing_code", None) is not None and runs(event_timing.ID):   # the timing's waits and calls
        out[event_timing.ID] = event_timing.claimed_parts(timeline, limits_for(event_timing), _summed(out))
    if getattr(timeline, "code_builds", None) is not None and runs(runtime_compilation.ID):   # the builds' host time
        out[runtime_compilation.ID] = runtime_compilation.claimed_parts(timeline, limits_for(runtime_compilation),
                                                                       _summed(out))
    pools: tuple = ()   # (the allocator's calls, where they are the captures' pools: allocator-churn's time is theirs)
    if getattr(timeline, "graph_captures", None) is not None and runs(graph_recapture.ID):   # the captures' host time
        within = (allocator_churn.ID,) if timeline.graph_captures.allocator_within else ()
        out[graph_recapture.ID] = graph_recapture.claimed_parts(timeline, limits_for(graph_recapture),
                                                                _summed(out, leaving=within))
        pools = within if out[graph_recapture.ID] else ()
    if activity is not None and runs(HOST_WAIT_ID):   # the waits: what the causes above leave of each part
        waits = wait_parts(timeline, _summed(out, leaving=pools), classes_taken(timeline))
        if sum(waits.values()) >= WAIT_MIN_SHARE * (timeline.summary.span_ns or float("inf")):
            out[HOST_WAIT_ID] = waits
    if getattr(timeline, "host_data", None) is not None and runs(host_data.ID):   # the data's handling, its copies
        # with it: where the pageable copies are the data's, pinning them is part of this change (rank: `within`)
        pinned = (pageable_memcpy.ID,) if timeline.host_data.pageable_within else ()
        data = host_data.claimed_parts(timeline, limits_for(host_data), _summed(out, leaving=pinned + pools))
        if data:
            out[host_data.ID] = data
    wider = wider_changes(timeline, out)   # causes whose change is part of a wider one's: the wider counts their time
    inside = tuple(wider)
    if getattr(timeline, "syncs", None) is not None and runs(SYNC_ID):   # last: idle_sync is the waits' first
        owned = sum(sum(out.get(cause, {}).values()) for cause in SYNCING_CAUSES)
        # (syncs that are all the data's waits: what removing them saves alone, counted within host-data's)
        alone = inside + ((wider[SYNC_ID],) if SYNC_ID in wider else ())
        # (a checkpoint's file writes after a sync are host-wait's)
        synced = sync_parts(timeline, _summed(out, leaving=alone), owned)
        if sum(synced.values()) >= SYNC_MIN_SHARE * (timeline.summary.span_ns or float("inf")):
            out[SYNC_ID] = synced
    if runs(LAUNCH_ID):   # after every wider cause: of the other parts, what they leave
        beside = launch_parts(timeline, _summed(out, leaving=inside))
        if beside:
            out[LAUNCH_ID] = beside
    return {cause: parts for cause, parts in out.items() if any(parts.values())}


def _summed(claimed: dict[str, dict[str, float]], leaving: tuple = ()) -> dict[str, float]:
    """ns of each part these causes claim together, `leaving` out those whose time a wider cause counts."""
    out: dict[str, float] = {}
    for cause, parts in claimed.items():
        if cause in leaving:
            continue
        for part, ns in parts.items():
            out[part] = out.get(part, 0.0) + ns
    return out


# host-sync's id, budget part, change and default min_idle_share, here so that the claims read the one value
# (host-sync imports this module): the syncs claim their time only where host-sync's finding speaks
SYNC_ID, SYNC_PART, SYNC_CHANGE, SYNC_MIN_SHARE = "host-sync", "idle_sync", {"remove": ("sync",)}, 0.03


# The host's waits that follow reads of one byte to the host (Copies.boolean_reads), at this share of them or more,
# are checks of values: blind67_distval's 4 a step (256 in 64 steps, each after a reduction kernel) are
# torch.distributions' argument checks; turned off, they saved 11.2 ms a step, their kernels and host code with them
VALUE_CHECKS_SHARE = 0.5


def host_sync_calls(timeline) -> int:
    """The window's waits for the GPU: explicit syncs, copies to the host and poll loops (one each), less the waits
    between streams on the GPU (cudaStreamWaitEvent: the host does not wait in them, host_activity.csv) and the syncs
    that are a copy's own wait (a copy to the host and its sync: one wait)."""
    syncs = timeline.syncs
    rows = [*syncs.explicit, *syncs.implicit, *syncs.polls]   # (a poll loop: one wait)
    return (sum(r.calls for r in rows) - sum(r.calls for r in syncs.explicit if r.name and not waits_for_gpu(r.name))
            - syncs.copy_waits)


def checks_values(timeline) -> bool:
    """Whether most of the host's waits follow a one-byte read (VALUE_CHECKS_SHARE): checks of values."""
    reads = timeline.copies.boolean_reads if getattr(timeline, "copies", None) is not None else 0
    calls = host_sync_calls(timeline) if getattr(timeline, "syncs", None) is not None else 0
    return bool(calls) and reads >= VALUE_CHECKS_SHARE * calls


def sync_change(timeline) -> dict:
    """The change host-sync stands for: its waits gone, and where they are checks of values (checks_values), the
    checks with them (the reads, the kernels that made each value, the host's way to their calls)."""
    return {**SYNC_CHANGE, "uncheck": True} if checks_values(timeline) else SYNC_CHANGE


# the wider causes whose changes take syncs away with them (the tuner's trials, the timing code, each waited for):
# what they claimed is part of what the replay without any sync saves
SYNCING_CAUSES = (autotuning.ID, event_timing.ID)


def sync_parts(timeline, taken: dict[str, float], owned_ns: float = 0.0) -> dict[str, float]:
    """The parts host-sync claims: the idle_sync time the causes before it leave, and where the replay of the
    steps without the syncs (pricing: one process's steps) saves more (by over pricing.DISAGREE: less is the
    replay's noise, matmul_sync's 2.21 ms against its 2.13 ms part), the rest from the parts a drained queue
    leaves idle, in DRAIN_PARTS' order. After a sync the GPU's queue is empty and it waits on each launch until
    the host gets ahead again: the budget counts that wait as launch time, which removing the syncs gives back
    (a `.item()` twice a step: the sync part 0.1 ms, the replay 3.26 ms, the twin without them 3.90 ms).
    `owned_ns`, what SYNCING_CAUSES claimed, is part of that replay's saving (their syncs are among the calls it
    removes): only the rest is the other syncs' (kin54's traced ResNet-50: 40 of its 41 syncs the timing's)."""
    def left(part: str) -> float:
        return max(0.0, budget_part(timeline, part)[0] - taken.get(part, 0.0))
    parts = {SYNC_PART: left(SYNC_PART)}
    syncs = timeline.syncs
    calls = sum(r.calls for r in (*syncs.explicit, *syncs.implicit, *syncs.polls))
    priced = pricing.price(timeline, sync_change(timeline), float("inf")) if calls and len(timeline.devices) <= 1 \
        else None
    extra = priced.savings_ns - owned_ns - parts[SYNC_PART] if priced is not None else 0.0
    if priced is None or extra <= pricing.DISAGREE * max(parts[SYNC_PART], priced.savings_ns):
        extra = 0.0   # no replay, or it agrees with the part: the part alone
    for part in DRAIN_PARTS:
        if extra <= 0:
            break
        if part == SYNC_PART:
            continue
        take = min(extra, left(part))
        parts[part] = take
        extra -= take
    return {part: ns for part, ns in parts.items() if ns > 0}


# launch-overhead's id, budget part and change, here so that the claims read the one value (launch-overhead
# imports this module)
LAUNCH_ID, LAUNCH_PART, LAUNCH_CHANGE = "launch-overhead", "idle_launch", {"graph": True}
# where the GPU's work goes once the launch paths are gone: under the host's own code that stays (not into the
# idle time a sync, a dependency or graph scheduling leaves, which no host time covers)
LAUNCH_BESIDE = "idle_host"
GPU_PARTS = ("gpu_compute", "gpu_communication", "gpu_copy")


def launch_parts(timeline, taken: dict[str, float]) -> dict[str, float]:
    """The parts beside idle_launch that launch-overhead's change (each step one graph launch) takes, where the
    replay of the steps says so: where the host holds the step, the launch paths' host time is what the step
    loses, and the GPU's work, which ran while the host launched (the budget's GPU time, not its launch wait),
    then runs under the host work that stays, in what was idle_host. The replay saving more than the whole
    launch wait (by over pricing.DISAGREE), the rest is claimed from what the wider causes leave of idle_host
    (blind_heads_base: 891 launches a step, the replay 37.7 ms a step, the launch wait
    32.4 ms, the GPU busy 4.4 ms a step under the launch paths; host-compute's 9.4 ms of longer host stretches
    stay, and the GPU's work runs under them), and no more than the GPU's busy time: the work that moves. Nothing
    where launch-overhead does not speak."""
    check = check_by_id(LAUNCH_ID)   # (by the registry: launch-overhead imports this module)
    if check is None or len(timeline.devices) > 1 or not timeline.budget or \
            getattr(timeline, "launches", None) is None:
        return {}
    limits = limits_for(check)

    def left(part: str) -> float:
        return max(0.0, budget_part(timeline, part)[0] - taken.get(part, 0.0))
    part_ns, part_share = budget_part(timeline, LAUNCH_PART)
    if not launch_speaks(timeline.launches, part_share * left(LAUNCH_PART) / part_ns if part_ns else 0.0, limits):
        return {}
    # against the whole launch wait: the replay also takes the launch wait the wider causes claim (the
    # launches after a sync, which host-sync counts), which is theirs, not beside this part
    launch_ns = part_ns
    priced = pricing.price(timeline, LAUNCH_CHANGE, launch_ns)
    extra = priced.savings_ns - launch_ns if priced is not None else 0.0
    # (over DISAGREE of the launch wait, as said above; of the replay's figure, a replay held to the window's GPU idle
    # left graph51_gradclip's 4.5 ms a step of idle_host, 10.6% of its launch wait, to host-compute: the graphed twin
    # saved the two together, 46.4 ms a step)
    if extra <= pricing.DISAGREE * launch_ns:
        return {}   # no replay, or it agrees with the part: the part alone
    # the GPU's work fills no more of idle_host than its own time
    busy = sum(budget_part(timeline, part)[0] for part in GPU_PARTS)
    take = min(extra, left(LAUNCH_BESIDE), busy)
    # under DISAGREE of the launch wait: the replay's noise beside the part, not a claim (attn_sdpa: 0.01 ms a
    # step of idle_host left beside 1.35 ms of launch wait)
    return {LAUNCH_BESIDE: take} if take > pricing.DISAGREE * launch_ns else {}


def pageable_parts(timeline, taken: dict[str, float]) -> dict[str, float]:
    """The idle parts pageable-memcpy's change (pinned memory, copied without a wait) takes beside its gpu_copy part:
    the GPU's idle time under the calls that staged the copies, and where the replay of the steps saves more than that
    and the copies' own saving, the rest from the idle parts the drained queue leaves (DRAIN_PARTS, what the causes
    before it leave): a dict batch's 40 small pageable columns, each `.to("cuda")` a copy and its wait, left the GPU
    idle under the copy calls 0.6 ms a step and between them, on the host's way from one to the next, 1.4 ms more
    (blind67_fields: the replay 2.08 ms a step, the fix 2.27)."""
    from nsanalyze.checks.program._copies import pageable_saving, pinned_rates

    parts = pageable_memcpy.blocked_idle_by_part(timeline)
    block = getattr(timeline, "pricing_block", None)
    if not parts or block is None or len(timeline.devices) > 1 or not timeline.budget:
        return parts   # (no upload held the host: the copies' own saving lies in gpu_copy, its part)
    rate = pinned_rates(timeline, block.graph)
    own = sum(parts.values()) + pageable_saving(timeline)[0]
    priced = pricing.price(timeline, pageable_memcpy.CHECK.change, own, rate)
    extra = (priced.replayed_ns - own) if priced is not None else 0.0
    if extra <= pricing.DISAGREE * max(own, priced.replayed_ns if priced is not None else 0.0):
        return parts
    for part in DRAIN_PARTS:
        left = max(0.0, budget_part(timeline, part)[0] - taken.get(part, 0.0) - parts.get(part, 0.0))
        take = min(extra, left)
        if take > 0:
            parts[part] = parts.get(part, 0.0) + take
            extra -= take
    return parts


def launch_speaks(launches, unclaimed_share: float, limits) -> bool:
    """Whether launch-overhead speaks: a loop of launches (not only start-up's first ones, min_launches) whose
    launch wait, less what wider causes claim, is min_idle_share of the window. Its finding and its claim
    beside its part (launch_parts) ask the same question here."""
    return launches.launches >= limits.min_launches and unclaimed_share >= limits.min_idle_share


# Where a class's saving exceeds the idle time its calls cover (a cudaFree drains the launch queue, and the
# host relaunches into an idle GPU), the rest lies in these parts, in this order.
DRAIN_PARTS = ("idle_launch", "idle_host", "idle_sync", "idle_other")


def _class_claim(timeline, entry, cost) -> dict[str, float]:
    """The parts a class's finding claims: the idle time its calls cover, and the rest of its saving from the
    parts the drained queue leaves idle (what removing the calls gives back beyond their own time)."""
    parts = dict(entry.idle_by_part)
    extra = max(0.0, (cost.savings_ns if cost else 0.0) - entry.idle_ns)
    for part in DRAIN_PARTS:
        if extra <= 0:
            break
        take = min(extra, max(0.0, budget_part(timeline, part)[0] - parts.get(part, 0.0)))
        parts[part] = parts.get(part, 0.0) + take
        extra -= take
    return parts


def wider_changes(timeline, claimed: dict) -> dict[str, str]:
    """The causes of these claims whose change is part of another's (pricing.contains), each to the wider cause that
    counts its time: pageable-memcpy's pinned copies where host-data's change, the data kept on the GPU, takes the
    pageable copies, host-sync's syncs gone where the syncs are those copies' waits, and allocator-churn's calls where
    they are the pools of graphs captured anew each step (graph-recapture's change keeps one)."""
    out: dict[str, str] = {}
    data = getattr(timeline, "host_data", None)
    if host_data.ID in claimed and data is not None:
        out.update({cause: host_data.ID for cause, within in ((pageable_memcpy.ID, data.pageable_within),
                                                              (SYNC_ID, data.syncs_within)) if within})
    captures = getattr(timeline, "graph_captures", None)
    if graph_recapture.ID in claimed and captures is not None and captures.allocator_within:
        out[allocator_churn.ID] = graph_recapture.ID
    return out


def counted_beside(timeline, claimed: dict[str, dict[str, float]], of: str | None = None) -> dict[str, dict[str, float]]:
    """Of the causes' claims (claims_by_cause), those a finding of `of` is priced beside: a cause within another's
    change left out (that one counts its time), and for the finding of a cause within another's, the wider one too:
    that finding says what its own change saves alone, counted within the wider one's."""
    wider = wider_changes(timeline, claimed)
    leaving = tuple(wider) + ((wider[of],) if of in wider else ())
    return {cause: parts for cause, parts in claimed.items() if cause not in leaving}


def claims(timeline, of: str | None = None) -> dict[str, float]:
    """ns of each budget part that wider causes claim beside a finding of `of` (counted_beside, summed)."""
    return _summed(counted_beside(timeline, claims_by_cause(timeline), of))


def unclaimed_part(timeline, part: str, device_id=None, of: str | None = None) -> tuple[float, float]:
    """(ns, share) of a budget part less what wider causes claim of it (see claims; `of`: the finding's check)."""
    ns, share = budget_part(timeline, part, device_id)
    if device_id is not None:
        return ns, share   # one GPU's part: the claims are over the GPUs' mean
    claimed = min(ns, claims(timeline, of).get(part, 0.0))
    if claimed and ns:
        share *= (ns - claimed) / ns
        ns -= claimed
    return ns, share


