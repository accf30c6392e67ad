#!/usr/bin/env python3
"""The statistics of `campaign results`, computed by scipy and statsmodels.

A peer to Sources/CampaignResults/Statistics.swift, for tests that check
`campaign results --json` against the libraries the Swift code mirrors.

stdin:  {"confidence": 0.95,
         "groups": [{"name": "A", "population": N, "converted": C, "planned": P}, ...],
         "control": "control" or null,          # null: compare with the first group
         "weights": {"A": 45, ...} or null}     # the planned split, for sample-ratio mismatch
stdout: {"groups": [{"name", "rate", "rate_ci",                        # every group
                     "diff", "diff_ci", "lift", "z", "p_value"}, ...],  # every group but the reference
         "chi2", "chi2_df", "chi2_p_value", "srm_chi2", "srm_p_value"}
Undefined values (no population, a pooled rate of 0 or 1, an expected count of 0) are null.
"""
import json
import math
import sys
import warnings

from scipy.stats import chi2_contingency, chisquare
from statsmodels.stats.proportion import confint_proportions_2indep, proportion_confint, proportions_ztest


def number(x):
    """A float for JSON, or None for nan and infinities (what the Swift side leaves nil)."""
    x = float(x)
    return x if math.isfinite(x) else None


def main():
    request = json.load(sys.stdin)
    alpha = 1 - request["confidence"]
    groups = request["groups"]
    reference = next((g for g in groups if g["name"] == request.get("control")), groups[0] if groups else None)
    out = {"groups": []}
    for g in groups:
        n, c = int(g["population"]), int(g["converted"])
        row = {"name": g["name"], "rate": c / n if n > 0 else None, "rate_ci": None}
        if n > 0:
            row["rate_ci"] = [number(v) for v in proportion_confint(c, n, alpha=alpha, method="wilson")]
        if g is not reference:
            n2, c2 = int(reference["population"]), int(reference["converted"])
            row.update(diff=None, diff_ci=None, lift=None, z=None, p_value=None)
            if n > 0 and n2 > 0:
                p1, p2 = c / n, c2 / n2
                row["diff"] = p1 - p2
                row["diff_ci"] = [number(v) for v in confint_proportions_2indep(
                    c, n, c2, n2, method="newcomb", compare="diff", alpha=alpha)]
                row["lift"] = (p1 - p2) / p2 if p2 != 0 else None
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # 0/0 when the pooled rate is 0 or 1: nan, reported as null
                    z, p = proportions_ztest(count=[c, c2], nobs=[n, n2])
                    row.update(z=number(z), p_value=number(p))
        out["groups"].append(row)

    out.update(chi2=None, chi2_df=None, chi2_p_value=None)
    # Groups nobody was measured in are left out of the table, as campaign results leaves them.
    table = [[int(g["converted"]), int(g["population"]) - int(g["converted"])] for g in groups if int(g["population"]) > 0]
    try:
        # With fewer than two groups measured there is nothing to test: null here.
        if len(table) >= 2:
            result = chi2_contingency(table, correction=False)
            out.update(chi2=number(result.statistic), chi2_df=int(result.dof), chi2_p_value=number(result.pvalue))
    except ValueError:  # an expected count of 0 (a row or column of zeros)
        pass

    out.update(srm_chi2=None, srm_p_value=None)
    weights = request.get("weights") or {}
    planned = [int(g.get("planned", 0)) for g in groups]
    shares = [float(weights.get(g["name"], 0)) for g in groups]
    if len(groups) >= 2 and sum(planned) > 0 and all(math.isfinite(w) and w > 0 for w in shares):
        total, weight_total = float(sum(planned)), sum(shares)
        result = chisquare(planned, f_exp=[total * w / weight_total for w in shares])
        out.update(srm_chi2=number(result.statistic), srm_p_value=number(result.pvalue))

    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
