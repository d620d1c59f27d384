"""How far two float32 computations of one quantity may differ when their sums run in other orders.

Chunking the positions, batching a population, recomputing a layer or fusing a kernel changes
the order in which a reduction adds its terms, and the result's last bits with it. How many
bits depends on the machine (its BLAS blocking, SIMD width and thread count), so a tolerance
read off one machine's result fails on another: it has to come from an error bound.

The bound. Adding ``n`` terms ``x_i`` in floating point, in any order, gives the exact sum
within ``gamma_(n-1) * sum |x_i|``, where ``gamma_k = k u / (1 - k u)`` and ``u = eps / 2``
is the unit roundoff (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed.,
section 4.2). Two orders of the same sum therefore differ by at most about
``2 (n - 1) u sum |x_i| < n * eps * sum |x_i|``.

What stands in for ``sum |x_i|``. The terms behind one element are not visible to a test, so
the tensor's largest magnitude stands in for their absolute sum: exact for terms of one sign,
and for terms that partly cancel the ``n`` of the worst case (every rounding error the same
sign) is far above the ``sqrt(n)`` of a typical accumulation, which leaves room for the
cancellation. So every element may differ by ``n * eps * max |expected|``, and no more.
``n`` is the length of the longest sum whose order differs between the two computations: the
vocabulary of a log-softmax, the inner dimension of a matrix product, or the positions a
weight's gradient adds up. Rounding in the shorter sums of the other layers, and its
propagation through them, falls well within the same slack (on the tiny models of the tests
the differences seen are about ``10 * eps * max |expected|``, against ``n`` in the hundreds).

The tolerance scales with the tensor, not with each element, so a gradient element that is
itself rounding noise (the sum of large terms that cancel) is compared at the tensor's scale,
where its noise belongs. A real mistake (a log-prob at the wrong position, a chunk counted
twice or dropped) changes values by a sizeable fraction of the tensor's scale, orders of
magnitude above ``n * eps`` for any ``n`` a test uses (``n * eps`` is below 1e-3 for
``n < 8000`` in float32).
"""

from __future__ import annotations

import torch


def reordering_tolerance(expected: torch.Tensor, terms: int) -> dict[str, float]:
    """``rtol`` and ``atol`` for :func:`torch.testing.assert_close` of ``expected`` computed
    again with sums of ``terms`` terms added in another order (see the module docstring).

    >>> reordering_tolerance(torch.tensor([0.5, -2.0]), terms=100)["atol"] == 100 * 2 ** -23 * 2
    True
    """
    if terms < 1:
        raise ValueError(f"terms must be at least 1, got {terms}")
    eps = torch.finfo(expected.dtype).eps
    scale = float(expected.detach().abs().max()) if expected.numel() else 0.0
    return {"rtol": 0.0, "atol": terms * eps * scale}


def assert_close_reordered(actual: torch.Tensor, expected: torch.Tensor, terms: int,
                           msg: str | None = None) -> None:
    """Assert ``actual`` equals ``expected`` up to a reordering of sums of ``terms`` terms;
    ``msg`` (a tensor's name, say) heads the report of the elements that differ."""
    torch.testing.assert_close(
        actual, expected, msg=None if msg is None else lambda report: f"{msg}: {report}",
        **reordering_tolerance(expected, terms))
