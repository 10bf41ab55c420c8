"""A real Kineto trace replicated to a given size for `make bench`: the trace's events copied again and
again, each copy shifted past the previous in time, with its correlation ids, external ids, flow ids and
ProfilerStep numbers moved past the previous copy's, so the copies read as one long run."""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path

STEP = re.compile(r"^ProfilerStep#(\d+)$")


def replicate(source: Path, target: Path, size: int) -> int:
    """Writes `target` (plain JSON) of at least `size` bytes; returns the number of copies."""
    trace = json.load(gzip.open(source) if source.suffix == ".gz" else open(source, "rb"))
    events = trace.pop("traceEvents")
    timed = [e for e in events if isinstance(e, dict) and isinstance(e.get("ts"), (int, float))]
    first = min(e["ts"] for e in timed)
    last = max(e["ts"] + (e.get("dur") or 0) for e in timed)
    shift = last - first + 1000.0

    def largest(values):
        return max((v for v in values if isinstance(v, int)), default=0) + 1

    args = [e.get("args") for e in events if isinstance(e, dict) and isinstance(e.get("args"), dict)]
    corr = largest(a.get("correlation") for a in args)
    ext = largest(a.get("External id") for a in args)
    flow = largest(e.get("id") for e in events if isinstance(e, dict))
    steps = largest(int(m.group(1)) for e in events if isinstance(e, dict)
                    for m in [STEP.match(str(e.get("name")))] if m)
    head = json.dumps(trace, indent=1)[:-2]    # the trace's other keys, then the events
    partial = target.with_suffix(".partial")
    copies = 0
    with open(partial, "w") as out:
        out.write(head + ',\n "traceEvents": [\n')
        written, sep = 0, ""
        while written < size:
            k = copies
            lines = []
            for e in events:
                if not isinstance(e, dict) or (k and e.get("ph") == "M"):
                    continue
                e = dict(e)
                if k:
                    if isinstance(e.get("ts"), (int, float)):
                        e["ts"] = round(e["ts"] + k * shift, 3)
                    if isinstance(e.get("id"), int):
                        e["id"] += k * flow
                    m = STEP.match(str(e.get("name")))
                    if m:
                        e["name"] = f"ProfilerStep#{int(m.group(1)) + k * steps}"
                    if isinstance(e.get("args"), dict):
                        a = e["args"] = dict(e["args"])
                        if isinstance(a.get("correlation"), int):
                            a["correlation"] += k * corr
                        if isinstance(a.get("External id"), int):
                            a["External id"] += k * ext
                lines.append(json.dumps(e))
            block = sep + ",\n".join(lines)
            sep = ",\n"
            out.write(block)
            written += len(block)
            copies += 1
        out.write("\n]}\n")
    partial.rename(target)
    return copies


if __name__ == "__main__":
    print(replicate(Path(sys.argv[1]), Path(sys.argv[2]), int(float(sys.argv[3]))))
