"""Load test of ``derl-bench serve``: concurrent OpenEnv sessions on 127.0.0.1.

    python benchmarks/serve_load.py --sessions 32 --steps 50      # the figures in docs/serving.md

Starts ``derl-bench serve ENV --max-sessions N`` in its own process, opens N WebSocket sessions
with OpenEnv's client at once, and plays S steps in each (a new episode whenever one ends),
timing every step's round trip. Then it checks that nothing leaked: the server holds no open
env (``/derl/status``) and has no child process left (a ScienceWorld JVM). The in-process step
(``gymnasium.make`` with the same wrappers and commands, one env) is timed in the same run;
the ratio served / in-process is reported for one session alone and under the load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import httpx

import derl_bench  # noqa: F401  (registers the envs)
from derl_bench.integrations.openenv_server import DerlAction, DerlEnvClient
from derl_bench.observers.think_action import ThinkActionWrapper

REPO = Path(__file__).resolve().parent.parent
COMMANDS = ("look", "inventory", "go to desk 1", "examine desk 1", "go to bed 1", "look")


def action(i: int) -> str:
    return f"<think>keep looking</think><action>{COMMANDS[i % len(COMMANDS)]}</action>"


def in_process_step_ms(env_id: str, steps: int, seed: int = 0) -> float:
    """Mean wall time of one step of the env as the server makes it, in this process."""
    env = ThinkActionWrapper(gym.make(env_id))
    total, done, taken = 0.0, True, 0
    try:
        while taken < steps:
            if done:
                env.reset(seed=seed + taken)
                done = False
            start = time.perf_counter()
            _, _, terminated, truncated, _ = env.step(action(taken))
            total += time.perf_counter() - start
            done = terminated or truncated
            taken += 1
    finally:
        env.close()
    return 1000 * total / steps


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                out.append(int(entry))
    return out


class Server:
    """``derl-bench serve`` in a child process, for a ``with`` block."""

    def __init__(self, env_id: str, max_sessions: int) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "derl_bench", "serve", env_id, "--port", str(self.port),
             "--max-sessions", str(max_sessions)],
            env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True)

    def __enter__(self) -> Server:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited: {self.process.stderr.read()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("the server did not come up within 120 s")

    def status(self) -> dict[str, Any]:
        return httpx.get(f"{self.url}/derl/status", timeout=10).json()

    def __exit__(self, *exc: object) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


async def _session(url: str, index: int, steps: int, latencies: list[float],
                   errors: list[str]) -> None:
    try:
        async with DerlEnvClient(base_url=url, message_timeout_s=300) as env:
            done, taken = True, 0
            while taken < steps:
                if done:
                    await env.reset(seed=1000 * index + taken)
                start = time.perf_counter()
                result = await env.step(DerlAction(text=action(taken)))
                latencies.append(time.perf_counter() - start)
                done = result.done
                taken += 1
    except Exception as exc:  # every failure is counted, none stops the others
        errors.append(f"session {index}: {type(exc).__name__}: {exc}")


def served_steps(server: Server, sessions: int, steps: int) -> dict[str, Any]:
    """Play ``sessions`` concurrent sessions of ``steps`` steps; latencies and errors."""
    latencies: list[float] = []
    errors: list[str] = []

    async def run() -> None:
        await asyncio.gather(*(_session(server.url, i, steps, latencies, errors)
                               for i in range(sessions)))

    start = time.perf_counter()
    asyncio.run(run())
    wall = time.perf_counter() - start
    ms = sorted(1000 * x for x in latencies)
    return {"sessions": sessions, "steps_per_session": steps, "steps": len(ms),
            "errors": errors, "wall_s": round(wall, 2),
            "steps_per_s": round(len(ms) / wall, 1) if wall else 0.0,
            "step_ms_mean": round(statistics.fmean(ms), 2) if ms else None,
            "step_ms_p50": round(ms[len(ms) // 2], 2) if ms else None,
            "step_ms_p95": round(ms[int(0.95 * (len(ms) - 1))], 2) if ms else None}


def measure(env_id: str, sessions: int, steps: int, solo_steps: int = 100) -> dict[str, Any]:
    """The load test's figures (see the module docstring)."""
    local_ms = in_process_step_ms(env_id, solo_steps)
    with Server(env_id, max_sessions=sessions) as server:
        solo = served_steps(server, 1, solo_steps)
        load = served_steps(server, sessions, steps)
        deadline = time.monotonic() + 30
        while server.status()["open_envs"] and time.monotonic() < deadline:
            time.sleep(0.1)
        open_after = server.status()["open_envs"]
        children_after = _children(server.process.pid)
    return {"env_id": env_id, "in_process_step_ms": round(local_ms, 3),
            "solo": solo, "load": load,
            "solo_ratio": round(solo["step_ms_mean"] / local_ms, 2),
            "load_ratio": round(load["step_ms_mean"] / local_ms, 2),
            "open_envs_after": open_after, "child_processes_after": len(children_after)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="derl/ALFWorld-v0")
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    figures = measure(args.env, args.sessions, args.steps)
    print(json.dumps(figures, indent=2))
    ok = (not figures["load"]["errors"] and not figures["solo"]["errors"]
          and figures["open_envs_after"] == 0 and figures["child_processes_after"] == 0)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
