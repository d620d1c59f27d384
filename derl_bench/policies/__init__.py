"""LLM policies: a causal LM, its tokenizer, per-family prompts and parsers, generation backends.

See :mod:`derl_bench.policies.policy` for the policy, :mod:`~derl_bench.policies.loading` for
loading a model (or a LoRA adapter checkpoint), :mod:`~derl_bench.policies.prompts` for the
prompts, :mod:`~derl_bench.policies.session` for an agent episode's prompt state,
:mod:`~derl_bench.policies.backends` for transformers/vLLM generation,
:mod:`~derl_bench.policies.fast` for the lean forward pass and sampler (reading models through
:mod:`~derl_bench.policies.decoder`) and :mod:`~derl_bench.policies.tiny` for the tiny model
built in code.
"""

from derl_bench.policies.backends import (
    GenerationBackend,
    SamplingConfig,
    TransformersBackend,
    VLLMBackend,
    make_backend,
)
from derl_bench.policies.loading import load_model_and_tokenizer
from derl_bench.policies.policy import Generation, LLMPolicy
from derl_bench.policies.prompts import AgentPrompt, AgentTurn, MathPrompt, render
from derl_bench.policies.session import AgentSession
from derl_bench.policies.tiny import TinyModelSpec, init_tiny_model

__all__ = [
    "AgentPrompt",
    "AgentSession",
    "AgentTurn",
    "Generation",
    "GenerationBackend",
    "LLMPolicy",
    "MathPrompt",
    "SamplingConfig",
    "TinyModelSpec",
    "TransformersBackend",
    "VLLMBackend",
    "init_tiny_model",
    "load_model_and_tokenizer",
    "make_backend",
    "render",
]
