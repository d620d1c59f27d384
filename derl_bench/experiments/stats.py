"""Paired comparisons over seeds: mean difference, 95% confidence interval, detectable effect.

Every comparison of two methods in derl-bench's experiments is *paired by seed*: both methods
ran with the same seed (the same generation-0 draws where they share a sampler, the same noise
stream), so the per-seed differences are what varies. The interval is Student's t over those
differences; the minimal detectable effect (MDE) is the true difference the design would detect
with 80% power in a two-sided test at the 5% level, given the differences' spread::

    >>> d = paired_difference([0.5, 0.6, 0.7, 0.6], [0.4, 0.4, 0.5, 0.5])
    >>> d["mean"], d["n"], d["ci_low"] > 0
    (0.15, 4, True)
    >>> round(t_quantile(0.975, 9), 3)
    2.262

A board makes several comparisons at once, so each board's comparisons are corrected together
by Holm's step-down method (:func:`holm`): adjusted p-values, and each interval widened to the
level of its step, so that an interval excluding 0 is a difference detected at the board's
family-wise 5% level. The MDE a corrected comparison reports is the one under that correction
(``mde_holm``), not the uncorrected one. A comparison whose differences do not vary (two
policies at the same floor on every seed) has no t test: no p-value (:func:`t_p_value` gives
``None``), no interval, and it is left out of its family instead of being read as detected.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any


def _t_cdf(x: float, df: int) -> float:
    """Student's t CDF by Simpson's rule on the density (plenty for 2-4 digits)."""
    if x < 0:
        return 1.0 - _t_cdf(-x, df)
    norm = math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2))
    steps = 2000
    h = x / steps
    total = 0.0
    for i in range(steps + 1):
        weight = 1 if i in (0, steps) else (4 if i % 2 else 2)
        total += weight * (1 + (i * h) ** 2 / df) ** (-(df + 1) / 2)
    return 0.5 + norm * total * h / 3


@functools.lru_cache(maxsize=4096)
def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (``0.5 < p < 1``).
    Kept once computed: a board asks for the same few levels and degrees of freedom hundreds
    of times, and each costs a bisection over a numerical integral."""
    if not 0.5 < p < 1 or df < 1:
        raise ValueError("t_quantile needs 0.5 < p < 1 and df >= 1")
    low, high = 0.0, 1.0
    while _t_cdf(high, df) < p:
        high *= 2
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if _t_cdf(mid, df) < p else (low, mid)
    return (low + high) / 2


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value)."""
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return mean, sd


def paired_difference(a: Sequence[float], b: Sequence[float], level: float = 0.95,
                      power: float = 0.8) -> dict[str, float]:
    """``a - b`` paired by position (seed): mean, standard error, the ``level`` confidence
    interval, and the minimal detectable effect at ``power`` (see the module docstring)."""
    if len(a) != len(b) or not a:
        raise ValueError("paired_difference needs two equally long, non-empty sequences")
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    n = len(diffs)
    mean, sd = mean_sd(diffs)
    se = sd / math.sqrt(n)
    if n < 2:
        return {"mean": round(mean, 4), "se": 0.0, "ci_low": mean, "ci_high": mean, "n": n,
                "mde": math.inf}
    t_ci = t_quantile(1 - (1 - level) / 2, n - 1)
    mde = (t_ci + t_quantile(power, n - 1)) * se
    return {"mean": round(mean, 4), "se": round(se, 4), "ci_low": round(mean - t_ci * se, 4),
            "ci_high": round(mean + t_ci * se, 4), "n": n, "mde": round(mde, 4)}


def t_p_value(mean: float, se: float, n: int) -> float | None:
    """Two-sided p-value of a paired t test of ``mean`` = 0, or ``None`` when there is no test:
    fewer than 2 seeds, or a standard error of 0 (every seed's difference the same, e.g. two
    policies at the same floor). A t statistic needs a spread; with none, a difference of 0.1
    points on every seed is no more evidence than a difference of 0.

    >>> round(t_p_value(0.15, 0.0289, 4), 3)
    0.014
    >>> t_p_value(-0.001, 0.0, 3) is None, t_p_value(0.2, 0.1, 1) is None
    (True, True)
    """
    if n < 2 or se == 0:
        return None
    return max(0.0, min(1.0, 2.0 * (1.0 - _t_cdf(abs(mean) / se, n - 1))))


NO_TEST = "no test: zero variance"
"""What a comparison without a p-value says in place of one (:func:`t_p_value`)."""


def holm_p(ps: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of the p-values ``ps`` of one family, in their order: the
    ``k``-th smallest becomes the largest of ``(m - j) * p_(j)`` over ``j <= k`` (at most 1).
    For tests that are not t-tests (McNemar's, the sign-flip test); :func:`holm` does the
    same for paired differences and adds their intervals.

    >>> holm_p([0.01, 0.04, 0.03])
    [0.03, 0.06, 0.06]
    """
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    adjusted = [0.0] * len(ps)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
        adjusted[i] = running
    return adjusted


def holm(differences: Sequence[dict[str, float]], alpha: float = 0.05,
         ) -> list[dict[str, Any]]:
    """Holm's step-down correction of several :func:`paired_difference` results taken together.

    Each result gains ``p`` (its own paired t test), ``p_holm`` (Holm-adjusted),
    ``holm_low``/``holm_high`` (its interval at the level of its step, ``1 - alpha / (m - i)``
    for the comparison ranked ``i`` (from 0) by p-value, the steps after the first that is not
    rejected keeping that one's level), ``mde_holm`` (:func:`corrected_mde` under this
    correction) and ``family`` (``m``). An adjusted interval excludes 0 exactly when
    ``p_holm < alpha``.

    A comparison without a test (:func:`t_p_value` is ``None``) is left out of the family, so
    it costs the others no power: its ``p``, ``p_holm`` and interval are ``None`` and ``test``
    says why (:data:`NO_TEST`).

    >>> a = paired_difference([0.5, 0.6, 0.7, 0.6], [0.4, 0.4, 0.5, 0.5])
    >>> b = paired_difference([0.5, 0.6, 0.7, 0.6], [0.5, 0.7, 0.6, 0.6])
    >>> [round(r["p_holm"], 3) for r in holm([a, b])]
    [0.028, 1.0]
    >>> [r["holm_low"] > 0 for r in holm([a, b])]
    [True, False]
    >>> floor = paired_difference([0.0, 0.0, 0.0, 0.0], [0.001, 0.001, 0.001, 0.001])
    >>> [(r["family"], r["p_holm"]) for r in holm([a, floor])]
    [(1, 0.01389), (1, None)]
    """
    ps = [t_p_value(d["mean"], d["se"], int(d["n"])) for d in differences]
    tested = [i for i, p in enumerate(ps) if p is not None]
    m = len(tested)
    order = sorted(tested, key=lambda i: ps[i] or 0.0)
    out: list[dict[str, Any]] = [dict(d) for d in differences]
    for i, p in enumerate(ps):
        if p is None:
            out[i].update(p=None, p_holm=None, holm_low=None, holm_high=None, mde_holm=None,
                          family=m, test=_no_test(differences[i]))
    adjusted = dict(zip(order, holm_p([ps[i] or 0.0 for i in order]), strict=True))
    stopped_at = None
    for rank, i in enumerate(order):
        p, running = ps[i], adjusted[i]
        assert p is not None
        if stopped_at is None and running >= alpha:
            stopped_at = rank
        step = rank if stopped_at is None else stopped_at
        d, n = differences[i], int(differences[i]["n"])
        half = t_quantile(1 - alpha / (m - step) / 2, n - 1) * d["se"]
        out[i].update(p=round(p, 5), p_holm=round(running, 5),
                      holm_low=round(d["mean"] - half, 4), holm_high=round(d["mean"] + half, 4),
                      mde_holm=corrected_mde(d, m, alpha), family=m)
    return out


def detected(difference: dict[str, Any], alpha: float = 0.05) -> bool:
    """Whether a :func:`holm`-corrected difference is a detected one: it has a test and its
    adjusted p-value is below ``alpha`` (its interval excludes 0).

    >>> detected({"p_holm": 0.01}), detected({"p_holm": None}), detected({"p_holm": 0.2})
    (True, False, False)
    """
    p = difference.get("p_holm")
    return p is not None and p < alpha


def above_zero(difference: dict[str, Any]) -> bool:
    """Whether a :func:`holm`-corrected difference is detected *and* positive (its adjusted
    interval lies above 0); a comparison without a test never is.

    >>> above_zero({"holm_low": 0.02}), above_zero({"holm_low": None})
    (True, False)
    """
    low = difference.get("holm_low")
    return low is not None and low > 0


def corrected_mde(difference: dict[str, float], comparisons: int, alpha: float = 0.05,
                  power: float = 0.8) -> float:
    """The minimal detectable effect of ``difference`` (a :func:`paired_difference`) when it is
    one of ``comparisons`` Holm-corrected together: at the first step's level,
    ``alpha / comparisons``, the level a difference must pass wherever it ranks.

    >>> d = paired_difference([0.5, 0.6, 0.7, 0.6], [0.4, 0.4, 0.5, 0.5])
    >>> abs(corrected_mde(d, 1) - d["mde"]) < 1e-3, corrected_mde(d, 6) > d["mde"]
    (True, True)
    """
    n = int(difference["n"])
    if n < 2:
        return math.inf
    t_level = t_quantile(1 - alpha / comparisons / 2, n - 1)
    return round((t_level + t_quantile(power, n - 1)) * difference["se"], 4)


def format_p(p: float) -> str:
    """A p-value as the boards print it: two significant digits, and a bound below 0.0001,
    where the t tail underflows and a printed 0 would read as certainty.

    >>> format_p(0.01432), format_p(3e-12), format_p(0.0)
    ('0.014', '< 0.0001', '< 0.0001')
    """
    return "< 0.0001" if p < 1e-4 else f"{p:.2g}"


def describe(difference: dict[str, Any], digits: int = 1, scale: float = 100.0) -> str:
    """One comparison as a board prints it, in points (``scale`` x the difference): the
    difference, its interval, and the MDE, all Holm-corrected where :func:`holm` corrected it
    (the MDE under the correction, beside the family's size); a comparison without a test says
    so instead of an interval.

    >>> a = paired_difference([0.5, 0.6, 0.7, 0.6], [0.4, 0.4, 0.5, 0.5])
    >>> describe(a)
    '+15.0 [+5.8, +24.2] (MDE 12.0)'
    >>> describe(holm([a])[0])
    '+15.0 [+5.8, +24.2] (Holm p 0.014 over 1 comparison; MDE 12.0 under the correction)'
    >>> describe(paired_difference([0.0, 0.0, 0.0], [0.001, 0.001, 0.001]))
    '-0.1 (no test: zero variance)'
    """
    def pts(x: float) -> str:
        return f"{scale * x:+.{digits}f}"

    mean = pts(difference["mean"])
    if t_p_value(difference["mean"], difference["se"], int(difference["n"])) is None:
        return f"{mean} ({difference.get('test') or _no_test(difference)})"
    if "holm_low" in difference:
        size, name = int(difference["family"]), difference.get("holm_family")
        over = f"the {size} {name}" if name else f"{size}"
        return (f"{mean} [{pts(difference['holm_low'])}, {pts(difference['holm_high'])}] "
                f"(Holm p {format_p(difference['p_holm'])} over {over} comparison"
                f"{'s' if size != 1 else ''}; MDE {scale * difference['mde_holm']:.{digits}f}"
                " under the correction)")
    return (f"{mean} [{pts(difference['ci_low'])}, {pts(difference['ci_high'])}] "
            f"(MDE {scale * difference['mde']:.{digits}f})")


def _no_test(difference: dict[str, Any]) -> str:
    return NO_TEST if int(difference["n"]) > 1 else "no test: one seed"


def mean_ci(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """Mean and the ``level`` t interval of ``values`` (a band for a plot)."""
    n = len(values)
    mean, sd = mean_sd(values)
    if n < 2:
        return mean, mean, mean
    half = t_quantile(1 - (1 - level) / 2, n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def clopper_pearson(successes: int, trials: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) ``level`` interval of a binomial proportion, found by
    bisection on the binomial tail probabilities.

    >>> [round(x, 4) for x in clopper_pearson(3, 400)]
    [0.0015, 0.0218]
    >>> clopper_pearson(0, 10)[0], round(clopper_pearson(10, 10)[0], 4)
    (0.0, 0.6915)
    """
    if trials < 1 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials and trials >= 1, got {successes}, "
                         f"{trials}")
    alpha = (1 - level) / 2

    def at_most(k: int, p: float) -> float:
        # In logs: math.comb overflows a float beyond about 1,000 trials.
        if p <= 0.0 or p >= 1.0:
            return 1.0 if p <= 0.0 or k >= trials else 0.0
        log_p, log_q, log_n = math.log(p), math.log1p(-p), math.lgamma(trials + 1)
        return min(1.0, sum(math.exp(log_n - math.lgamma(i + 1) - math.lgamma(trials - i + 1)
                                     + i * log_p + (trials - i) * log_q) for i in range(k + 1)))

    def solve(f: Callable[[float], float], target: float) -> float:
        low, high = 0.0, 1.0  # f falls as p rises
        for _ in range(60):
            mid = (low + high) / 2
            low, high = (mid, high) if f(mid) > target else (low, mid)
        return (low + high) / 2

    lower = 0.0 if successes == 0 else solve(lambda p: at_most(successes - 1, p), 1 - alpha)
    upper = 1.0 if successes == trials else solve(lambda p: at_most(successes, p), alpha)
    return lower, upper


EXACT_SIGN_FLIPS = 16
"""Up to this many nonzero differences, :func:`sign_flip_test` enumerates every sign pattern
(2^16 = 65,536); above it, it draws :data:`SIGN_FLIP_DRAWS` patterns."""
SIGN_FLIP_DRAWS = 100_000


def sign_flip_test(differences: Sequence[float], seed: int = 0) -> dict[str, Any]:
    """Two-sided sign-flip permutation test of "the paired differences are centred at 0".

    Under the null each difference is as likely positive as negative, so the mean of the
    differences is compared with the means of every pattern of flipped signs (exact up to
    :data:`EXACT_SIGN_FLIPS` nonzero differences; above it, :data:`SIGN_FLIP_DRAWS` patterns
    drawn with ``seed``, the observed one counted in). It assumes no shape of the
    differences' distribution, so it holds where they take a few values only (a board whose
    per-seed differences are about -28, 0 or +28). Zeros carry no sign and are kept as they
    are. ``p`` is the share of patterns whose mean is at least as far from 0 as the observed.

    >>> sign_flip_test([1.0, 2.0, 3.0])["p"]   # all 8 patterns; +-6 are as extreme: 2 of 8
    0.25
    >>> sign_flip_test([28.0] * 7 + [0.0] * 3)["p"]   # 2 of 2^7 patterns
    0.015625
    >>> sign_flip_test([0.0, 0.0])["p"]
    1.0
    """
    import numpy as np

    values = np.asarray(differences, dtype=float)
    nonzero = values[values != 0]
    observed = abs(values.sum())
    tolerance = 1e-9 * max(1.0, float(np.abs(values).sum()))
    k = len(nonzero)
    if k == 0:
        return {"p": 1.0, "n": len(values), "patterns": 1, "exact": True}
    if k <= EXACT_SIGN_FLIPS:
        # every pattern: bit j of row i says whether difference j is flipped
        rows = np.arange(2 ** k, dtype=np.int64)[:, None] >> np.arange(k) & 1
        sums = np.abs(((1 - 2 * rows) * nonzero).sum(axis=1))
        extreme = int((sums >= observed - tolerance).sum())
        return {"p": extreme / 2 ** k, "n": len(values), "patterns": 2 ** k, "exact": True}
    rng = np.random.default_rng(seed)
    signs = rng.choice([-1.0, 1.0], size=(SIGN_FLIP_DRAWS, k))
    extreme = int((np.abs((signs * nonzero).sum(axis=1)) >= observed - tolerance).sum())
    return {"p": (extreme + 1) / (SIGN_FLIP_DRAWS + 1), "n": len(values),
            "patterns": SIGN_FLIP_DRAWS, "exact": False}


def mcnemar_exact(a: Sequence[bool], b: Sequence[bool]) -> dict[str, Any]:
    """Exact McNemar test of "two paired yes/no outcomes are equally likely" (say, each
    seed's pick of two methods "found the class"): only the discordant seeds count, and under
    the null each is as likely to favour either method, so their split is Binomial(n, 1/2);
    ``p`` is two-sided (twice the smaller tail, at most 1).

    >>> r = mcnemar_exact([True] * 7 + [False] * 3, [True] * 7 + [False] * 3)
    >>> r["only_a"], r["only_b"], r["p"]
    (0, 0, 1.0)
    >>> mcnemar_exact([True] * 6, [False] * 6)["p"]   # 2 * (1/2)^6
    0.03125
    """
    if len(a) != len(b):
        raise ValueError(f"paired outcomes differ in length: {len(a)} and {len(b)}")
    only_a = sum(1 for x, y in zip(a, b, strict=True) if x and not y)
    only_b = sum(1 for x, y in zip(a, b, strict=True) if y and not x)
    n = only_a + only_b
    tail = sum(math.comb(n, i) for i in range(min(only_a, only_b) + 1)) / 2 ** n
    return {"only_a": only_a, "only_b": only_b, "n": len(a), "p": min(1.0, 2 * tail)}
