"""gpu-policies-whole-units.test's driver: whole_units_time against a brute force."""
import itertools
import sys

sys.path.insert(0, sys.argv[1])
from gpu_policies import whole_units_time  # noqa: E402


def brute(units, unit_ms, factor, tp):
    costs = [unit_ms * factor] + [unit_ms] * (tp - 1)
    total = tp * units
    best = None
    for split in itertools.product(range(total + 1), repeat=tp):
        if sum(split) == total:
            t = max(u * c for u, c in zip(split, costs))
            best = t if best is None else min(best, t)
    return best


cases = 0
for tp in (1, 2, 3, 4):
    for units in (1, 2, 3, 5):
        for factor in (1.0, 1.3, 2.0, 2.8, 3.0, 7.5):
            for unit_ms in (0.25, 0.953, 1.7):
                got = whole_units_time(units, unit_ms, factor, tp)
                want = brute(units, unit_ms, factor, tp)
                assert abs(got - want) <= 1e-12 * want, (units, unit_ms, factor, tp, got, want)
                cases += 1
print(f"brute force agrees: {cases} cases")
t = whole_units_time(3, 0.953, 2.8, 4)
held = int(t / (0.953 * 2.8) + 1e-9)
print(f"ViT-B/16 heads: {t / 0.953:.0f} heads' time ({t:.3f} ms), the straggler holding {held}")
print(f"one rank: all {whole_units_time(5, 1.0, 3.0, 1) / 3.0:.0f} units")
