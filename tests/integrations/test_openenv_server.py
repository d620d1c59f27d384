"""The OpenEnv server: a real server on 127.0.0.1, played by OpenEnv's own WebSocket client and
by plain HTTP; bad input over the wire; nothing leaked (ALFWorld library copies, JVMs)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import httpx
import pytest

pytest.importorskip("openenv.core")

from derl_bench.families.alfworld.engine import libraries_in_use  # noqa: E402
from derl_bench.integrations.openenv_server import (  # noqa: E402
    DerlAction,
    DerlEnvClient,
    build_app,
    open_envs,
)
from derl_bench.integrations.sessions import TaskError  # noqa: E402
from tests.integrations.serving import java_children, serving, wait_until  # noqa: E402

ENV = "derl/ALFWorld-v0"
REWARD = "success + 0.1 * mean(action_admissible)"
REPO = Path(__file__).resolve().parents[2]


def _act(command: str) -> DerlAction:
    return DerlAction(text=f"<think>next</think><action>{command}</action>")


def _walkthrough(seed: int) -> list[str]:
    env = gym.make(ENV)
    try:
        return list(env.reset(seed=seed)[1]["walkthrough"])
    finally:
        env.close()


@pytest.fixture(scope="module")
def alfworld_server(data_root):
    with serving(build_app(ENV, max_sessions=3, session_timeout=None)) as url:
        yield url


def test_an_episode_played_over_the_websocket_carries_primitives_and_the_meta_reward(
        alfworld_server):
    walkthrough = _walkthrough(seed=5)

    async def play() -> list:
        async with DerlEnvClient(base_url=alfworld_server) as env:
            results = [await env.reset(seed=5, reward=REWARD)]
            for command in walkthrough:
                results.append(await env.step(_act(command)))
                if results[-1].done:
                    break
            state = await env.state()
            return [results, state]

    results, state = asyncio.run(play())
    first, last = results[0], results[-1]
    assert first.observation.text.startswith("-= Welcome to TextWorld, ALFRED! =-")
    assert set(first.observation.metadata["primitives"]) >= {"success", "format_valid"}
    assert last.done and last.observation.primitives["success"] == 1.0
    assert last.observation.terminated and not last.observation.truncated
    # the increments sum to the episode's Meta-Reward: success 1 + 0.1 * all admissible
    assert sum(r.reward for r in results[1:]) == pytest.approx(last.observation.meta_reward)
    assert last.observation.meta_reward == pytest.approx(1.1)
    assert state.step_count == len(results) - 1 and state.done and state.reward == REWARD
    assert wait_until(lambda: open_envs() == 0) and libraries_in_use() == 0


def test_bad_input_over_http_gets_statuses_and_the_server_keeps_serving(alfworld_server):
    with httpx.Client(base_url=alfworld_server, timeout=60) as http:
        step = http.post("/step", json={"action": {"text": "look"}})
        assert step.status_code == 409 and "reset first" in step.json()["detail"]
        malformed = http.post("/step", json={"action": {"txt": "look"}})
        assert malformed.status_code == 422
        wrong_type = http.post("/step", json={"action": {"text": 7}})
        assert wrong_type.status_code == 422
        level = http.post("/reset", json={"level": "L9"})
        assert level.status_code == 400 and "no level 'L9'" in level.json()["detail"]
        unknown = http.post("/reset", json={"difficulty": "hard"})
        assert unknown.status_code == 400 and "difficulty" in unknown.json()["detail"]
        reward = http.post("/reset", json={"reward": "succes"})
        assert reward.status_code == 400 and "did you mean 'success'" in reward.json()["detail"]
        index = http.post("/reset", json={"index": 10**9})
        assert index.status_code == 400
        good = http.post("/reset", json={"seed": 1})
        assert good.status_code == 200 and good.json()["observation"]["text"]
        assert http.get("/health").json()["status"] == "healthy"
    assert wait_until(lambda: open_envs() == 0) and libraries_in_use() == 0


def test_bad_input_over_the_websocket_gets_error_frames_and_the_session_goes_on(
        alfworld_server):
    async def play() -> dict:
        errors = {}
        async with DerlEnvClient(base_url=alfworld_server) as env:
            for name, message in {
                "before_reset": {"type": "step", "data": {"text": "look"}},
                "malformed": {"type": "step", "data": {"txt": "look"}},
                "unknown_type": {"type": "jump"},
                "bad_level": {"type": "reset", "data": {"level": "L7"}},
            }.items():
                with pytest.raises(RuntimeError) as info:
                    await env._send_and_receive(message)
                errors[name] = str(info.value)
            await env.reset(seed=2, max_episode_steps=1)
            last = await env.step(_act("look"))
            with pytest.raises(RuntimeError) as info:
                await env.step(_act("look"))
            errors["after_end"] = str(info.value)
            errors["last_truncated"] = last.observation.truncated
            again = await env.reset(seed=2)  # the same session plays on
            errors["again"] = again.observation.text
        return errors

    errors = asyncio.run(play())
    assert "reset first" in errors["before_reset"]
    assert "VALIDATION_ERROR" in errors["malformed"]
    assert "UNKNOWN_TYPE" in errors["unknown_type"]
    assert "no level 'L7'" in errors["bad_level"]
    assert "episode is over" in errors["after_end"] and errors["last_truncated"] is True
    assert errors["again"].startswith("-= Welcome")
    assert wait_until(lambda: open_envs() == 0) and libraries_in_use() == 0


def test_more_sessions_than_allowed_are_refused_until_one_closes(data_root):
    async def play() -> tuple[str, str, str]:
        async with serving_async(build_app(ENV, max_sessions=2, session_timeout=None)) as url:
            first, second = DerlEnvClient(base_url=url), DerlEnvClient(base_url=url)
            await first.reset(seed=0)
            await second.reset(seed=1)
            third = DerlEnvClient(base_url=url)
            with pytest.raises(RuntimeError) as info:
                await third.reset(seed=2)
            await third.close()
            # The server refuses at the connection: a client whose first message goes out only
            # after the refusal and the close have arrived still reads the refusal.
            late = DerlEnvClient(base_url=url)
            await late.connect()
            await asyncio.sleep(0.5)
            with pytest.raises(RuntimeError) as late_info:
                await late.reset(seed=2)
            await late.close()
            await first.close()
            fourth = DerlEnvClient(base_url=url)
            for _ in range(100):  # the server frees the slot once it sees the close
                try:
                    result = await fourth.reset(seed=3)
                    break
                except (RuntimeError, ConnectionError, OSError):
                    await fourth.close()
                    fourth = DerlEnvClient(base_url=url)
                    await asyncio.sleep(0.05)
            await fourth.close()
            await second.close()
            return str(info.value), str(late_info.value), result.observation.text

    refused, refused_late, later = asyncio.run(play())
    assert "CAPACITY_REACHED" in refused and "2/2" in refused
    assert "CAPACITY_REACHED" in refused_late
    assert later.startswith("-= Welcome")
    assert wait_until(lambda: open_envs() == 0) and libraries_in_use() == 0


class serving_async:  # noqa: N801 - used like the context manager it wraps
    """:func:`serving` for ``async with``: the server thread starts outside the event loop."""

    def __init__(self, app: object) -> None:
        self._context = serving(app)

    async def __aenter__(self) -> str:
        return await asyncio.to_thread(self._context.__enter__)

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self._context.__exit__, None, None, None)


def test_a_client_that_disconnects_mid_episode_leaves_nothing_open(alfworld_server):
    async def play() -> int:
        env = DerlEnvClient(base_url=alfworld_server)
        await env.reset(seed=4)
        await env.step(_act("look"))
        held = open_envs()
        env._ws.transport.abort()  # gone without a close frame, as a crashed trainer goes
        return held

    assert asyncio.run(play()) == 1
    assert wait_until(lambda: open_envs() == 0)
    assert libraries_in_use() == 0


def test_an_expired_session_is_closed_with_its_env_and_says_so(data_root):
    async def play() -> tuple[int, str]:
        async with serving_async(build_app(ENV, max_sessions=2, session_timeout=0.5)) as url:
            async with DerlEnvClient(base_url=url) as env:
                await env.reset(seed=0)
                held = open_envs()
                # OpenEnv's reaper looks every max(timeout / 4, 5) seconds
                await asyncio.to_thread(wait_until, lambda: open_envs() == 0, 20.0)
                with pytest.raises(RuntimeError) as info:
                    await env.step(_act("look"))
                return held, str(info.value)

    held, message = asyncio.run(play())
    assert held == 1 and "session is closed" in message
    assert open_envs() == 0 and libraries_in_use() == 0


def test_build_app_refuses_an_unknown_env_id_and_a_bad_default_task(data_root):
    with pytest.raises(TaskError, match="unknown env id 'derl/ALFWorld-v9'"):
        build_app("derl/ALFWorld-v9")
    with pytest.raises(TaskError, match="no level 'L5'"):
        build_app(ENV, level="L5")
    with pytest.raises(TaskError, match="max_sessions must be at least 1"):
        build_app(ENV, max_sessions=0)


@pytest.mark.slow
def test_scienceworld_sessions_stop_their_jvms_however_they_end(data_root):
    before = java_children()

    async def play() -> int:
        async with serving_async(build_app("derl/ScienceWorld-v0", max_sessions=2,
                                           session_timeout=None)) as url:
            polite, rude = DerlEnvClient(base_url=url), DerlEnvClient(base_url=url)
            await polite.reset(seed=0, action_format="command")
            await rude.reset(seed=1, action_format="command")
            step = await rude.step(DerlAction(text="look around"))
            assert step.observation.primitives["format_valid"] == 1.0
            running = len(java_children()) - len(before)
            await polite.close()
            rude._ws.transport.abort()
            await asyncio.to_thread(wait_until, lambda: open_envs() == 0)
            return running

    assert asyncio.run(play()) == 2
    assert wait_until(lambda: sorted(java_children()) == sorted(before))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_serve_command_serves_until_terminated(data_root):
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    server = subprocess.Popen(
        [sys.executable, "-m", "derl_bench", "serve", "derl/GSM8K-v0", "--port", str(port),
         "--max-sessions", "2", "--reward", "outcome + 0.5 * format_boxed"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        def up() -> bool:
            try:
                return httpx.get(f"{url}/health", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        assert wait_until(up, 120), server.stderr.read() if server.poll() is not None else ""

        async def play() -> list:
            async with DerlEnvClient(base_url=url) as client:
                first = await client.reset(index=0)
                last = await client.step(DerlAction(text="The answer is \\boxed{72}."))
                return [first, last]

        first, last = asyncio.run(play())
        assert first.observation.text.startswith("Natalia sold clips")
        assert last.done and last.reward == 1.5 and last.observation.primitives["outcome"] == 1.0
        assert httpx.get(f"{url}/derl/status").json() == {
            "env_id": "derl/GSM8K-v0", "max_sessions": 2, "open_envs": 0}
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
        finally:
            if server.poll() is None:
                server.kill()
    out, _ = server.communicate()
    assert server.returncode == 0 and "serving derl/GSM8K-v0" in out


def test_the_serve_command_refuses_an_unknown_env_id():
    result = subprocess.run([sys.executable, "-m", "derl_bench", "serve", "derl/Nope-v0"],
                            capture_output=True, text=True, env={**os.environ,
                                                                 "PYTHONPATH": str(REPO)})
    assert result.returncode == 2
    assert result.stderr.startswith("error: unknown env id 'derl/Nope-v0'")


def test_a_binary_frame_ends_its_session_with_a_clear_error_and_the_server_goes_on():
    import json

    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    from derl_bench.integrations.openenv_server import BINARY_FRAME_MESSAGE

    async def play(url: str) -> tuple[int, dict, int | None, str]:
        async with connect(url.replace("http://", "ws://") + "/ws") as socket:
            await socket.send(json.dumps({"type": "reset", "data": {"index": 0}}))
            assert json.loads(await socket.recv())["type"] == "observation"
            held = open_envs()
            await socket.send(b'{"type": "reset", "data": {}}')
            frame = json.loads(await socket.recv())
            with pytest.raises(ConnectionClosed) as closed:
                await socket.recv()
        async with DerlEnvClient(base_url=url) as env:  # the server goes on serving
            again = await env.reset(index=0)
        code = closed.value.rcvd.code if closed.value.rcvd is not None else None
        return held, frame, code, again.observation.text

    with serving(build_app("derl/Arithmetic-v0", max_sessions=1, session_timeout=None)) as url:
        held, frame, code, text = asyncio.run(play(url))
    assert held == 1
    assert frame == {"type": "error",
                     "data": {"message": BINARY_FRAME_MESSAGE, "code": "SESSION_ERROR"}}
    assert code == 1003  # unsupported data
    assert text.startswith("Compute ")
    assert wait_until(lambda: open_envs() == 0)


def _serve(*args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    """``derl-bench serve ARGS`` run to its end (a server that starts is killed at ``timeout``
    and fails the test)."""
    return subprocess.run([sys.executable, "-m", "derl_bench", "serve", *args],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def test_the_serve_command_refuses_a_port_in_use_before_it_says_it_serves():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _serve("derl/Arithmetic-v0", "--port", str(port))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (f"error: --port {port}: the port is already in use on 127.0.0.1 "
                             "(another server?); choose another --port\n")


@pytest.mark.parametrize("value", ["-5", "nan"])
def test_the_serve_command_refuses_a_negative_session_timeout(value):
    result = _serve("derl/Arithmetic-v0", "--port", str(_free_port()), "--session-timeout",
                    value)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == ("error: --session-timeout must be a number of seconds > 0, or 0 "
                             f"for never, not {value}\n")


def test_the_serve_command_refuses_a_split_the_env_lacks_at_start_up(data_root):
    result = _serve(ENV, "--split", "nosplit", "--port", str(_free_port()))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == "error: derl/ALFWorld-v0 has no split 'nosplit' at level 'L0'\n"
