"""A run compiles its Meta-Reward once, where it starts, and hands the compiled reward down to
the trainer (compact or TRL): a spy on :class:`~derl_bench.reward.MetaReward` counts compiles."""

from __future__ import annotations

from pathlib import Path

import pytest

from derl_bench.cli import main
from derl_bench.reward import MetaReward

REPO = Path(__file__).resolve().parents[2]
ENV = "derl/Arithmetic-v0"
TINY = ["model=tiny", "steps=1", "group_size=2", "prompts_per_step=1", "max_new_tokens=8",
        "tensorboard=false", "progress=false", f"env_id={ENV}",
        "meta_reward=outcome - 0.01 * response_length"]


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The text of every Meta-Reward compiled while the test runs."""
    seen: list[str] = []
    init = MetaReward.__init__

    def counted(self: MetaReward, expr: str, *args: object, **kwargs: object) -> None:
        seen.append(expr)
        init(self, expr, *args, **kwargs)

    monkeypatch.setattr(MetaReward, "__init__", counted)
    return seen


@pytest.mark.parametrize("trainer", ["compact", "trl"])
def test_the_train_command_compiles_the_reward_once(tmp_path, compiles, trainer):
    if trainer == "trl":
        pytest.importorskip("trl")
    run = tmp_path / trainer
    assert main(["train", str(REPO / "baselines" / "gsm8k-outcome.yaml"), "--output", str(run),
                 *TINY, f"trainer={trainer}"]) == 0
    assert compiles == ["outcome - 0.01 * response_length"]


def test_served_sessions_of_one_task_share_one_compiled_reward(compiles):
    from derl_bench.integrations.sessions import EpisodeSession, Task

    task = Task(ENV, reward="outcome + 0.25 * format_boxed")
    sessions = [EpisodeSession(task) for _ in range(3)]
    try:
        assert compiles.count("outcome + 0.25 * format_boxed") <= 1
        assert len({id(s.meta_reward) for s in sessions}) == 1
        other = EpisodeSession(Task(ENV, reward="outcome"))
        assert other.meta_reward is not sessions[0].meta_reward
        other.close()
    finally:
        for session in sessions:
            session.close()
