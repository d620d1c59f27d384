"""The default harness: one chat completion per turn, made from the eval process.

derl-bench's envs have no tools: the model's whole reply is its action (an answer, or a
``<think>…</think><action>…</action>`` response), so an agent program would only pass the
conversation to the model and its reply back. This harness does that in-process through the
rollout's interception endpoint, as verifiers' harness contract allows, so a run needs neither
a sandbox nor a program to install. Another harness is chosen as usual
(``--env.agent.harness.id null``).
"""

from __future__ import annotations

from typing import Any

import httpx
import verifiers.v1 as vf
from verifiers.v1.dialects.chat import message_to_wire
from verifiers.v1.errors import MODEL_TRANSPORT_ERROR_EXIT_CODE


class DerlBenchHarnessConfig(vf.HarnessConfig):
    """No knobs beyond verifiers' own."""


class DerlBenchHarness(vf.Harness[DerlBenchHarnessConfig]):
    """Sends the conversation so far, returns when the model has answered."""

    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_RESUME = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(self, ctx: vf.ModelContext, trace: vf.Trace, runtime: vf.Runtime,
                     endpoint: str, secret: str, mcp_urls: dict[str, str],
                     data: vf.TaskData) -> vf.ProgramResult:
        """One model turn on ``data``'s prompt (the whole conversation when resumed)."""
        system, prompt = self.resolve_prompt(data)
        messages: list[dict[str, Any]] = []
        if system:
            messages.append({"role": "system", "content": system})
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        elif prompt is not None:
            messages.extend(message_to_wire(message) for message in prompt)
        # No client timeout: the agent's own rollout timeout bounds the turn.
        async with httpx.AsyncClient(timeout=None) as client:
            try:
                response = await client.post(
                    f"{endpoint.rstrip('/')}/chat/completions",
                    headers={"Authorization": f"Bearer {secret}"},
                    json={"model": ctx.model, "messages": messages})
            except httpx.TransportError as exc:
                return vf.ProgramResult(MODEL_TRANSPORT_ERROR_EXIT_CODE, "", repr(exc))
        if response.status_code >= 400:
            return vf.ProgramResult(1, "", f"model call answered {response.status_code}: "
                                           f"{response.text}")
        return vf.ProgramResult(0, response.text, "")
