"""gpu-policies-profile.test's driver: profile_split on an htp-run --profile report."""
import json
import math
import sys

sys.path.insert(0, sys.argv[1])
from gpu_policies import CALL_KINDS, call_kind, profile_split  # noqa: E402

with open(sys.argv[2]) as handle:
    report = json.load(handle)
calls = report["profile"]["calls"]
for kind in CALL_KINDS:
    print(f"{kind}: " + " ".join(sorted({c["name"] for c in calls if call_kind(c["name"]) == kind})))
split = profile_split(report)
ranks = len(calls[0]["median_ms"])
for rank in range(ranks):
    total = sum(c["median_ms"][rank] for c in calls)
    got = sum(split[kind][rank] for kind in CALL_KINDS)
    assert math.isclose(got, total, rel_tol=1e-12), (rank, got, total)
    assert all(split[kind][rank] > 0 for kind in ("hooks", "collectives")), (rank, split)
print(f"{ranks} ranks, each call counted once")
