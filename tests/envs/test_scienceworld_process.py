"""The ScienceWorld JVM's lifecycle: crashes, shutdown, startup errors, ports."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import gymnasium as gym
import pytest

import derl_bench  # noqa: F401 - registers the env ids
from derl_bench.families.scienceworld import ScienceWorldEnv
from derl_bench.families.scienceworld.simulator import (
    SimulatorCrashedError,
    SimulatorProcess,
    SimulatorStartError,
)


def _running(pid: int) -> bool:
    """True while ``pid`` is a live java process (zombies and reused pids do not count)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmdline = fh.read()
    except FileNotFoundError:
        return False
    return state != "Z" and b"java" in cmdline


def _wait_gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _running(pid):
            return True
        time.sleep(0.05)
    return False


def _java_children(pid: int) -> list[int]:
    """Java processes whose parent is ``pid`` (only the ones this test started)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if ppid == pid and _running(int(entry)):
            out.append(int(entry))
    return out


def test_killed_jvm_raises_clearly_and_reset_starts_a_new_one():
    before = _java_children(os.getpid())
    env = gym.make("derl/ScienceWorld-v0")
    try:
        env.reset(options={"task": "boil", "variation": 0})
        env.step("look around")
        old_pid = env.unwrapped.simulator.pid
        os.kill(old_pid, signal.SIGKILL)
        assert _wait_gone(old_pid)
        with pytest.raises(SimulatorCrashedError, match=r"JVM \(pid \d+\) exited.*reset\(\)"):
            env.step("open door to kitchen")
        with pytest.raises(gym.error.ResetNeeded):
            env.step("look around")
        obs, info = env.reset(options={"task": "boil", "variation": 0})
        assert env.unwrapped.simulator.pid != old_pid
        assert "called the" in obs
        _, _, _, _, info = env.step("open door to kitchen")
        assert info["primitives"]["action_valid"] == 1.0
    finally:
        env.close()
    assert _java_children(os.getpid()) == before


def test_close_and_interpreter_exit_leave_no_jvm():
    before = _java_children(os.getpid())
    env = ScienceWorldEnv()
    env.reset(seed=0)
    pid = env.simulator.pid
    assert sorted(_java_children(os.getpid())) == sorted([*before, pid])
    env.close()
    env.close()
    assert _wait_gone(pid)
    assert _java_children(os.getpid()) == before

    script = (
        "import derl_bench.families.scienceworld as s\n"
        "env = s.ScienceWorldEnv()\n"
        "env.reset(seed=1)\n"
        "print(env.simulator.pid, flush=True)\n"
    )
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           timeout=120, check=True)
    assert "Error" not in child.stderr, child.stderr
    assert _wait_gone(int(child.stdout.strip()))

    killed = subprocess.Popen([sys.executable, "-c", script + "import time; time.sleep(60)\n"],
                              stdout=subprocess.PIPE, text=True)
    jvm = int(killed.stdout.readline())
    killed.kill()
    killed.wait()
    assert _wait_gone(jvm), "the JVM outlived a SIGKILLed Python parent"


def test_missing_java_is_reported():
    with pytest.raises(SimulatorStartError, match="Java not found"):
        SimulatorProcess(java_path="/nonexistent/bin/java")


def test_port_in_use_is_reported():
    before = _java_children(os.getpid())
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(SimulatorStartError, match=f"port {port} is in use"):
            SimulatorProcess(port=port)
    assert _java_children(os.getpid()) == before


def test_port_taken_after_the_check_reports_the_whole_trace(monkeypatch):
    """When the port is taken between the probe and the JVM's bind, the JVM's own failure is
    reported, from its complete stack trace (its first line alone names no cause)."""
    import derl_bench.families.scienceworld.simulator as server

    monkeypatch.setattr(server, "_check_port_free", lambda port: None)
    before = _java_children(os.getpid())
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(SimulatorStartError, match=f"port {port} is in use"):
            SimulatorProcess(port=port)
    assert _java_children(os.getpid()) == before


def test_port_out_of_range_is_reported():
    with pytest.raises(SimulatorStartError, match="out of range"):
        SimulatorProcess(port=70000)


def test_bad_jvm_memory_is_reported():
    with pytest.raises(SimulatorStartError, match="rejected its options"):
        SimulatorProcess(jvm_memory="lots")


def test_vector_workers_get_their_own_ports():
    envs = gym.vector.AsyncVectorEnv(
        [lambda: gym.make("derl/ScienceWorld-v0")] * 2, shared_memory=False
    )
    try:
        _, infos = envs.reset(seed=0)
        assert len(infos["task_name"]) == 2
        _, rewards, _, _, infos = envs.step(["look around", "inventory"])
        (pid0, port0), (pid1, port1) = envs.call("get_wrapper_attr", "jvm_address")
        assert pid0 != pid1 and port0 != port1
        assert infos["primitives"]["action_valid"].tolist() == [1.0, 1.0]
    finally:
        envs.close()
