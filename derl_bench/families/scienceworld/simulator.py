"""A lean connection to ScienceWorld's simulator: one JVM, one py4j gateway, few round trips.

``scienceworld.ScienceWorldEnv.step`` makes eight Java calls a step (the step itself, score,
completion, move count, look, inventory, task description and the full list of valid actions,
which it copies element by element), and its Java side renders look and inventory for a
history and lists referents for debug printing on every step. :class:`SimulatorProcess` steps
the task's ``AgentInterface`` directly: the step, then its ``(observation, score, completed)``
result as one string. Valid actions, goal progress and the gold path are fetched only when
asked for, each list in a single call joined on the Java side.

The JVM is started by :class:`SimulatorProcess` itself rather than by the upstream wrapper so
that it can:

- cap the heap (``-Xmx512m`` by default) and use the serial collector (small resident memory);
- let the OS pick the port (``0``), so parallel processes and vector-env workers never collide;
- skip the Python callback server the upstream wrapper starts but never uses;
- silence the simulator's per-step debug printing (it would otherwise be piped to Python);
- report why startup failed (no Java, port in use, JVM error) and detect a dead JVM.

    >>> sim = SimulatorProcess()
    >>> sim.load("boil", 0, "easy")
    >>> observation, score, completed = sim.step("look around")
    >>> observation.splitlines()[0], score, completed
    ('This room is called the hallway. In it, you see: ', 0.0, False)
    >>> sim.close()
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import subprocess
import tempfile
import time
import weakref
from pathlib import Path
from typing import Any

DEFAULT_JVM_MEMORY = "512m"
STARTUP_TIMEOUT_S = 60.0
DETERMINISTIC_JVM_OPTIONS = ("-XX:+UnlockExperimentalVMOptions", "-XX:hashCode=2")
"""The simulator keeps objects in hash sets keyed by identity hash codes, so room contents,
valid actions and ambiguity menus come out in a different order on every load. A constant
identity hash makes those sets iterate in insertion order: the same (task, variation) then
gives the same text on every reset and in every process."""
_MAIN_FAILED = 'Exception in thread "main"'
UNKNOWN_ACTION = (
    "Unknown action.  Type 'help' for a list of actions, and 'objects' for a list of possible "
    "object referents."
)
"""What the upstream interface answers when the agent interface returns no text."""


class SimulatorError(RuntimeError):
    """The ScienceWorld simulator failed; the message says what happened."""


class SimulatorStartError(SimulatorError):
    """The JVM could not be started (no Java, port in use, bad options, missing jar)."""


class SimulatorCrashedError(SimulatorError):
    """The JVM died or the connection to it broke; the next ``reset`` starts a new one."""


def scienceworld_jar() -> Path:
    """Path of the simulator jar shipped in the ``scienceworld`` wheel."""
    try:
        from scienceworld.constants import JAR_PATH
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise SimulatorStartError(
            "the scienceworld package is not installed: pip install 'derl-bench[scienceworld]'"
        ) from exc
    return Path(JAR_PATH)


def find_java(java_path: str | None = None) -> str:
    """Resolve the ``java`` executable: the argument, else ``$JAVA_HOME/bin/java``, else PATH."""
    candidates = [java_path] if java_path else []
    if not java_path and os.environ.get("JAVA_HOME"):
        candidates.append(os.path.join(os.environ["JAVA_HOME"], "bin", "java"))
    if not java_path:
        candidates.append("java")
    for candidate in candidates:
        resolved = shutil.which(candidate)
        if resolved:
            return resolved
    raise SimulatorStartError(
        f"Java not found (looked for {', '.join(candidates)}): ScienceWorld needs a Java 17 "
        "runtime, e.g. `apt-get install openjdk-17-jre-headless`; or set JAVA_HOME or pass "
        "java_path="
    )


def _check_port_free(port: int) -> None:
    """Fail before starting a JVM when ``port`` is taken on the gateway's address.

    The JVM reports a taken port only through a stack trace on stderr, from a process that
    then lingers; probing first gives the same answer at once. ``SO_REUSEADDR`` matches the
    JVM's server socket, so a port in TIME_WAIT still counts as free.
    """
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OverflowError as exc:
            raise SimulatorStartError(f"port {port} is out of range (0..65535)") from exc
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise SimulatorStartError(
                    f"port {port} is in use: pass port=0 to let the OS choose a free port"
                ) from exc


def _shutdown(handles: dict[str, Any]) -> None:
    """Stop a JVM: disconnect the gateway, close the JVM's stdin (py4j's --die-on-broken-pipe
    exits), then terminate, then kill."""
    gateway = handles.pop("gateway", None)
    if gateway is not None:
        client = gateway._gateway_client
        # JavaGateway.close() leaves the client "connected", so the finalizers of JavaObjects
        # collected later would try to reconnect to the stopped JVM and log errors (from
        # inside garbage collection). Marking it disconnected makes them no-ops.
        client.is_connected = False
        try:
            client.close()
        except Exception:  # noqa: BLE001 - closing a broken connection must not raise
            pass
    proc: subprocess.Popen = handles["process"]
    if proc.poll() is None and proc.stdin is not None:
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            pass
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=3.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5.0)


class SimulatorProcess:
    """One ScienceWorld JVM and the py4j gateway to its ``PythonInterface``.

    ``jvm_memory`` is the heap cap passed as ``-Xmx`` (e.g. ``"512m"``, ``"1g"``); ``port`` is
    the gateway port, 0 (the default) letting the OS choose a free one. ``jvm_options`` are
    added to the java command line. ``fixed_object_order=False`` drops
    :data:`DETERMINISTIC_JVM_OPTIONS`, giving upstream's behaviour: object order (and with it
    some outcomes) changes on every load.
    """

    def __init__(
        self,
        *,
        jvm_memory: str = DEFAULT_JVM_MEMORY,
        port: int = 0,
        java_path: str | None = None,
        jvm_options: tuple[str, ...] = (),
        startup_timeout_s: float = STARTUP_TIMEOUT_S,
        fixed_object_order: bool = True,
    ) -> None:
        from py4j.java_gateway import GatewayParameters, JavaGateway, find_jar_path

        java = find_java(java_path)
        if port:
            _check_port_free(int(port))
        jar = scienceworld_jar()
        if not jar.is_file():
            raise SimulatorStartError(f"ScienceWorld jar missing at {jar}; reinstall scienceworld")
        classpath = os.pathsep.join([find_jar_path(), str(jar)])
        command = [
            java, f"-Xmx{jvm_memory}", "-XX:+UseSerialGC",
            "-Xss4m", *(DETERMINISTIC_JVM_OPTIONS if fixed_object_order else ()), *jvm_options,
            "-classpath", classpath,
            "py4j.GatewayServer", "--die-on-broken-pipe", str(int(port)),
        ]
        self.command = command
        # Both streams go to files, not pipes: nothing has to drain them while the JVM runs.
        self._stdout = tempfile.TemporaryFile()
        self._stderr = tempfile.TemporaryFile()
        try:
            self.process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=self._stdout, stderr=self._stderr,
                cwd=str(jar.parent),
            )
        except OSError as exc:
            self._stdout.close()
            self._stderr.close()
            raise SimulatorStartError(f"could not run {java}: {exc}") from exc
        self.pid = self.process.pid
        self._agent: Any = None
        self._handles: dict[str, Any] = {"process": self.process}
        self._finalizer = weakref.finalize(self, _shutdown, self._handles)
        try:
            self.port = self._read_port(startup_timeout_s, port)
            self._gateway = JavaGateway(
                gateway_parameters=GatewayParameters(port=self.port, auto_convert=False),
                java_process=self.process,
            )
            self._handles["gateway"] = self._gateway
            jvm = self._gateway.jvm
            # Silence the simulator's println debugging before Scala's Console first captures
            # System.out; otherwise every step writes kilobytes of text to the stdout file.
            jvm.java.lang.System.setOut(
                jvm.java.io.PrintStream(jvm.java.io.OutputStream.nullOutputStream())
            )
            self._join = jvm.java.lang.String.join
            self.server = self._gateway.jvm.scienceworld.runtime.pythonapi.PythonInterface()
        except SimulatorError:
            self.close()
            raise
        except Exception as exc:
            detail = self._stderr_tail()
            self.close()
            raise SimulatorStartError(
                f"ScienceWorld JVM failed to start: {exc}" + (f"\n{detail}" if detail else "")
            ) from exc

    def _stderr_tail(self, limit: int = 2000) -> str:
        try:
            fd = self._stderr.fileno()
            size = os.fstat(fd).st_size
            data = os.pread(fd, limit, max(0, size - limit))
        except (OSError, ValueError):
            return ""
        return data.decode("utf-8", "replace").strip()

    def _ends_with_newline(self) -> bool:
        size = os.fstat(self._stderr.fileno()).st_size
        return size > 0 and os.pread(self._stderr.fileno(), 1, size - 1) == b"\n"

    def _finished_stderr(self, settle_s: float = 1.0, cap_s: float = 30.0) -> str:
        """The JVM's stderr once the failure has been written out in full.

        The gateway's main thread prints its stack trace as it dies, and reading stderr while
        it prints can catch only the first line. A JVM that exits has written everything; one
        that outlives its main thread (py4j leaves a non-daemon thread behind) is stopped once
        stderr has not grown for ``settle_s`` and ends with a complete line.
        """
        deadline = time.monotonic() + cap_s
        size, since = -1, time.monotonic()
        while self.process.poll() is None and time.monotonic() < deadline:
            current = os.fstat(self._stderr.fileno()).st_size
            if current != size:
                size, since = current, time.monotonic()
            elif time.monotonic() - since >= settle_s and self._ends_with_newline():
                break
            time.sleep(0.05)
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self._stderr_tail()

    def _read_port(self, timeout_s: float, requested: int) -> int:
        """Read the port the gateway bound to (py4j prints it as the first stdout line)."""
        deadline = time.monotonic() + timeout_s
        while True:
            head = os.pread(self._stdout.fileno(), 64, 0)
            if b"\n" in head:
                break
            # The gateway's main thread can die (port in use) while the JVM lives on.
            if self.process.poll() is not None or _MAIN_FAILED in self._stderr_tail():
                break
            if time.monotonic() > deadline:
                raise SimulatorStartError(
                    f"ScienceWorld JVM did not report its port within {timeout_s:.0f} s"
                )
            time.sleep(0.01)
        line = head.split(b"\n", 1)[0].decode("utf-8", "replace")
        if line.strip().isdigit():
            return int(line)
        detail = self._finished_stderr()
        if "BindException" in detail or "Address already in use" in detail:
            raise SimulatorStartError(
                f"port {requested} is in use: pass port=0 to let the OS choose a free port"
            )
        if "Invalid maximum heap size" in detail or "Could not create the Java Virtual" in detail:
            raise SimulatorStartError(f"the JVM rejected its options {self.command[1:6]}: {detail}")
        raise SimulatorStartError(
            f"ScienceWorld JVM exited during startup (exit code {self.process.poll()}): "
            f"{detail or line or 'no output'}"
        )

    # -- liveness ------------------------------------------------------------------------------

    def alive(self) -> bool:
        """True while the JVM process runs."""
        return self.process.poll() is None

    def _call(self, what: str, fn: Any, *args: Any) -> Any:
        from py4j.protocol import Py4JError, Py4JJavaError

        if self.process.poll() is not None:
            raise self._crashed(what)
        try:
            return fn(*args)
        except Py4JJavaError as exc:
            if self.alive():
                raise SimulatorError(
                    f"ScienceWorld failed in {what}: {exc.java_exception}") from exc
            raise self._crashed(what) from exc
        except (Py4JError, OSError) as exc:
            raise self._crashed(what) from exc

    def _crashed(self, what: str) -> SimulatorCrashedError:
        # A killed JVM drops its socket a moment before the kernel lets it be reaped, so a
        # bare poll() here can call a dead JVM hung; a short wait tells the two apart.
        try:
            code: int | None = self.process.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            code = None
        state = f"exited with code {code}" if code is not None else "stopped answering"
        detail = self._stderr_tail(500)
        if "OutOfMemoryError" in detail:
            state += " (out of heap memory: raise jvm_memory)"
        return SimulatorCrashedError(
            f"the ScienceWorld JVM (pid {self.pid}) {state} during {what}; "
            "the episode is lost, call reset() to start a new JVM"
        )

    # -- simulator calls -----------------------------------------------------------------------

    def task_names(self) -> list[str]:
        return self._joined("getTaskNames", self.server.getTaskNames)

    def _joined(self, what: str, getter: Any) -> list[str]:
        """Fetch a Java ``List<String>`` in one round trip (joined on the Java side)."""
        text = self._call(what, lambda: self._join("\n", getter()))
        return text.split("\n") if text else []

    def _ints(self, what: str, getter: Any) -> list[int]:
        text = self._call(what, lambda: getter().toString())
        return [int(x) for x in text.strip("[]").split(",") if x.strip()]

    def max_variations(self, task: str) -> int:
        return int(self._call("getTaskMaxVariations", self.server.getTaskMaxVariations, task))

    def load(self, task: str, variation: int, simplifications: str, gold: bool = False) -> None:
        """Load (and initialise) a task variation; with ``gold`` also build its gold path."""
        error = self._call("load", self.server.load, task, int(variation), simplifications, gold)
        if error:
            raise SimulatorError(f"ScienceWorld could not load {task!r} #{variation}: {error}")
        self._agent = self._call("load", lambda: self.server.agentInterface().get())

    def step(self, action: str) -> tuple[str, float, bool]:
        """Run one action: ``(observation, score in [-1, 1], completed)``.

        Input the parser cannot match gives ``"No known action matches that input."``.
        """
        if self._agent is None:
            raise SimulatorError("step() before load()")
        # Tuple3.toString is "(observation,score,completed)"; only the observation has commas.
        text = self._call("step", lambda: self._agent.step(action).toString())
        observation, score, completed = text[1:-1].rsplit(",", 2)
        return observation or UNKNOWN_ACTION, float(score), completed == "true"

    def moves(self) -> int:
        """Simulator ticks since the load (upstream's ``get_num_moves``; ``wait`` costs 10)."""
        if self._agent is None:
            return 0
        return int(self._call("moves", self._agent.getCurIterations))

    def possible_actions(self) -> list[str]:
        """The action templates (``open OBJ``, ...), as upstream's ``help`` lists them."""
        return self._joined("possible_actions", self.server.getPossibleActions)

    def possible_objects(self) -> list[str]:
        """The object referents the agent can name now, as upstream's ``objects`` lists them."""
        return self._joined("possible_objects", self.server.getPossibleObjects)

    def valid_actions(self) -> list[str]:
        """The simulator's valid action-object combinations in the current state."""
        return self._joined("valid_actions", self.server.getValidActionObjectCombinations)

    def goal_progress(self) -> str:
        return self._call("goal_progress", self.server.getGoalProgressStr)

    def gold_actions(self) -> list[str]:
        return self._joined("gold_path", self.server.getGoldActionSequence)

    def task_description(self) -> str:
        return self._call("task_description", self.server.getTaskDescription)

    def simulator_step(self, action: str) -> tuple[str, float, bool]:
        """One action through the upstream ``PythonInterface.step`` (for comparisons)."""
        observation = self._call("step", self.server.step, action)
        score = self._call("step", self.server.getScore)
        completed = self._call("step", self.server.getCompleted)
        return observation, float(score), bool(completed)

    def variations(self, split: str) -> list[int]:
        """Variation indices of the loaded task in ``split`` (train, dev or test)."""
        getter = {
            "train": self.server.getVariationsTrain,
            "dev": self.server.getVariationsDev,
            "test": self.server.getVariationsTest,
        }[split]
        return self._ints(f"variations({split})", getter)

    def close(self) -> None:
        """Shut the gateway and the JVM down (idempotent)."""
        self._finalizer()
        for stream in (self._stdout, self._stderr):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
