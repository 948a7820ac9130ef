"""The reference answers of revisit_rule_cases.json's RV.demand and RV.price cases (issue 37),
worked out apart from the Lua: the marginal equation and the price each solved by a
200-step bisection. Prints the cases; they are the file's last ones.

Run: ``python tests/engine/data/revisit_price_cases.py``
"""

from __future__ import annotations

import json
import math
from typing import Any

KEEP = 0.5  # RV.KEEP: a page seen changing gets at least this share of a fair share
MU_LO, MU_HI = 1e-9, 1e9
Hist = dict[str, list[float]]


def freq(lam: float, w: float, mu: float) -> float:
    if lam <= 0 or w / lam <= mu:
        return 0.0
    c = 1 - mu * lam / w
    lo, hi = math.log(1e-12), math.log(700)
    for _ in range(200):
        mid = (lo + hi) / 2
        r = math.exp(mid)
        if (1 + r) * math.exp(-r) > c:
            lo = mid
        else:
            hi = mid
    return lam / math.exp((lo + hi) / 2)


def clamp(f: float, cfg: dict[str, float], n: int) -> float:
    lo = max(3600 / cfg["max"], KEEP * cfg["budget"] / max(n, 1))
    return min(max(f, lo), 3600 / cfg["min"])


def demand(h: Hist, mu: float, cfg: dict[str, float], n: int) -> float:
    return sum(e[0] * clamp(freq(e[2] / e[0], e[1] / e[0], mu), cfg, n) for e in h.values())


def price(h: Hist, target: float, cfg: dict[str, float], n: int) -> float:
    if demand(h, MU_LO, cfg, n) <= target:
        return MU_LO
    if demand(h, MU_HI, cfg, n) >= target:
        return MU_HI
    lo, hi = math.log(MU_LO), math.log(MU_HI)
    for _ in range(200):
        mid = (lo + hi) / 2
        if demand(h, math.exp(mid), cfg, n) > target:
            lo = mid
        else:
            hi = mid
    return math.exp((lo + hi) / 2)


def cases() -> list[dict[str, Any]]:
    cfg = {"budget": 100.0, "min": 60, "max": 86400, "w": 1}
    # 10 pages changing about hourly (w 1), 5 every 10 min (w 2), 2 every half minute (w 1)
    h: Hist = {"0": [10, 10, 10.0], "2": [5, 10, 30.0], "5": [2, 2, 120.0]}
    out: list[dict[str, Any]] = []
    for mu in (0.001, 0.02, 0.5):
        why = f"demand of a histogram at mu={mu}"
        out.append({"why": why, "fn": "demand", "args": [h, mu, cfg, 17],
                    "want": demand(h, mu, cfg, 17), "rel_tol": 1e-8})  # fmt: skip
    for target in (60.0, 150.0, 400.0):
        why = f"price meeting a demand of {target}/h"
        out.append({"why": why, "fn": "price", "args": [h, target, cfg, 17],
                    "want": price(h, target, cfg, 17), "rel_tol": 1e-7})  # fmt: skip
    out.append({"why": "spare budget: the lowest price (every page at cfg.min)", "fn": "price",
                "args": [h, 17 * 60 + 1, cfg, 17], "want": MU_LO})  # fmt: skip
    out.append({"why": "no budget left: the highest price (every page at its floor)",
                "fn": "price", "args": [h, 0, cfg, 17], "want": MU_HI})  # fmt: skip
    # no time scale: seconds instead of hours (rates and budget x 3600, bounds / 3600)
    fast = {"min": 60 / 3600, "max": 24, "budget": 360000.0, "w": 1}
    hs: Hist = {k: [e[0], e[1], e[2] * 3600] for k, e in h.items()}
    out.append({"why": "the same domain 3600 times faster: the price / 3600", "fn": "price",
                "args": [hs, 150.0 * 3600, fast, 17],
                "want": price(h, 150.0, cfg, 17) / 3600, "rel_tol": 1e-6})  # fmt: skip
    return out


if __name__ == "__main__":
    print(json.dumps(cases(), indent=0))
