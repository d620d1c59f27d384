"""``scripts/proxy_candidates.py`` (docs/proxy.md, "Should the proxy task move?") at a small
size: a base fine-tuned for a few steps, one GRPO step per hand-made reward, each scored."""

from __future__ import annotations

import json

from tests.scripts import load_script


def test_the_candidates_script_scores_a_base_and_each_reward(tmp_path, data_root):
    from derl_bench.experiments.proxy import HAND_MADE

    script = load_script("scripts/proxy_candidates.py")
    found = script.main(tmp_path, sft_steps=2, grpo_steps=1, tasks=["chain_sum"])
    assert list(found) == ["chain_sum"]
    row = found["chain_sum"]
    assert set(row) == {"base", "sft_s", *HAND_MADE}
    for label in ("base", *HAND_MADE):
        assert row[label]["n"] == 200 and 0.0 <= row[label]["success"] <= 1.0
    assert json.loads((tmp_path / "results.json").read_text()) == found
