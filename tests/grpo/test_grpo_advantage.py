"""Group-relative advantages."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from derl_bench.grpo import group_advantages


def test_standardised_within_each_group():
    adv = group_advantages([1.0, 0.0, 3.0, 1.0, 2.0, 3.0], [0, 0, 1, 1, 1, 1])
    assert adv[:2] == pytest.approx([1.0, -1.0], abs=1e-5)
    group = np.array([3.0, 1.0, 2.0, 3.0])
    expected = (group - group.mean()) / (group.std() + 1e-6)
    assert adv[2:] == pytest.approx(expected)


def test_degenerate_group_gets_zero_advantage():
    adv = group_advantages([0.7, 0.7, 0.7, 0.0, 1.0], [5, 5, 5, 6, 6])
    assert adv[:3].tolist() == [0.0, 0.0, 0.0]
    assert adv[3] < 0 < adv[4]
    assert group_advantages([1.0] * 4, [0] * 4, scale_by_std=False).tolist() == [0.0] * 4


def test_no_std_option_only_centres():
    adv = group_advantages([4.0, 0.0, 2.0], [0, 0, 0], scale_by_std=False)
    assert adv.tolist() == pytest.approx([2.0, -2.0, 0.0])


def test_groups_need_not_be_contiguous():
    adv = group_advantages([1.0, 5.0, 0.0, 5.0], [0, 1, 0, 1])
    assert adv.tolist() == pytest.approx([1.0, 0.0, -1.0, 0.0], abs=1e-5)


@pytest.mark.parametrize("rewards, groups", [([1.0, 2.0], [0]), ([float("nan"), 1.0], [0, 0])])
def test_bad_input_is_rejected(rewards, groups):
    with pytest.raises(ValueError):
        group_advantages(rewards, groups)


@given(st.lists(st.floats(-100, 100), min_size=2, max_size=16), st.booleans())
def test_advantages_sum_to_zero_per_group(rewards, scale):
    groups = [i % 2 for i in range(len(rewards))]
    adv = group_advantages(rewards, groups, scale_by_std=scale)
    for g in (0, 1):
        assert abs(adv[np.array(groups) == g].sum()) < 1e-6 * max(1.0, len(rewards))


def test_advantages_load_without_the_trainer():
    """The meta loop, SFT and evaluation import the advantage and the loss; the package must
    not pull the trainer, the envs and transformers in with them."""
    code = (
        "import json, sys\n"
        "import derl_bench.grpo as grpo\n"
        "import derl_bench.grpo.loss\n"
        "assert grpo.group_advantages([1.0, 0.0], [0, 0])[0] > 0\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout))
    assert "derl_bench.grpo.advantage" in loaded
    assert not {"derl_bench.grpo.trainer", "derl_bench.envs", "derl_bench.rollout",
                "transformers"} & loaded


def test_package_names_resolve_to_their_modules():
    import derl_bench.grpo as grpo
    from derl_bench.grpo.trainer import train

    assert grpo.train is train
    assert set(grpo.__all__) <= set(dir(grpo))
    with pytest.raises(AttributeError, match="no attribute 'trian'"):
        grpo.trian  # noqa: B018
