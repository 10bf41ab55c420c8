"""The floor for ncu reports: a bare loop over ncu_report reading every numeric metric of every launch."""
import sys

import ncu_report

context = ncu_report.load_report(sys.argv[1])
values = 0
for range_index in range(context.num_ranges()):
    profile_range = context.range_by_idx(range_index)
    for action_index in range(profile_range.num_actions()):
        action = profile_range.action_by_idx(action_index)
        for name in action.metric_names():
            metric = action.metric_by_name(name)
            if metric.kind() != metric.ValueKind_STRING:
                metric.as_double()
                values += 1
print(values)
