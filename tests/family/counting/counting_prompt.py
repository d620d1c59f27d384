"""The counting family's agent prompt text."""

from derl_bench.policies.prompts import AgentPromptText

PROMPT = AgentPromptText("You are an expert agent walking on a number line.")
