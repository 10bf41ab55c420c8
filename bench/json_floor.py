"""The floor for a Kineto trace: the standard library's whole-document parse of it (json.load), as the
reader did before it streamed."""
import json
import sys

with open(sys.argv[1], "rb") as handle:
    print(len(json.load(handle)["traceEvents"]))
