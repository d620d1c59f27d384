"""A derl-bench env served over HTTP and WebSocket with OpenEnv (``pip install
'derl-bench[serve]'``): ``derl-bench serve derl/ALFWorld-v0 --port 8000 --max-sessions 32``.

The app is ``openenv``'s ``create_app`` around :class:`DerlEnvironment`, so any OpenEnv client
plays it (TRL, SkyRL, Unsloth, or :class:`DerlEnvClient` here). Each WebSocket session (``/ws``)
has its own env; a reset may set the task: ``level``, ``split``, ``index`` (an item of the
split), ``reward`` (a Meta-Reward), ``semantics``, ``max_episode_steps`` and ``action_format``
(see :class:`~derl_bench.integrations.sessions.Task`), besides ``seed`` and ``episode_id``::

    async with DerlEnvClient(base_url="http://127.0.0.1:8000") as env:
        result = await env.reset(seed=0, level="L1", reward="success + 0.1 * goal_progress")
        result = await env.step(DerlAction(text="<think>…</think><action>look</action>"))
        result.observation.metadata["primitives"]     # the card's primitives at this step

Every observation carries the step's ``primitives``, ``meta_reward`` (the episode's Meta-Reward
so far), ``env_reward``, ``terminated``, ``truncated`` and ``step``, as fields and in its
metadata; its ``reward`` is the Meta-Reward's increment, so an episode's rewards sum to its
Meta-Reward.

Bad input gets a clear error and the server keeps serving. On the HTTP routes these are
statuses: 400 for a task that does not exist (unknown level, split, reward or parameter), 409
for a step out of turn (before a reset, or after the episode ended), 410 for a closed session,
422 for a malformed action. On a WebSocket they are error frames (OpenEnv's
``VALIDATION_ERROR`` for a malformed action, ``EXECUTION_ERROR`` with the same messages for the
rest, ``CAPACITY_REACHED`` and a close when ``--max-sessions`` sessions are open,
``SESSION_ERROR`` and a close for a binary frame). A session
whose client goes away, closes, or stays idle past ``--session-timeout`` is closed with its
env: a ScienceWorld JVM stops, an ALFWorld engine gives its library copy back.

OpenEnv's stateless HTTP ``/reset`` and ``/step`` make a fresh env per request (a ``/step``
there is always out of turn); episodes are played over the WebSocket.
"""

from __future__ import annotations

import functools
import json
import threading
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from openenv.core import EnvClient
from openenv.core.client_types import StepResult
from openenv.core.env_server import (
    Action,
    ConcurrencyConfig,
    Environment,
    Observation,
    State,
    create_app,
)
from openenv.core.env_server.types import EnvironmentMetadata, WSErrorCode, WSErrorResponse
from pydantic import Field

from derl_bench._version import __version__
from derl_bench.integrations.sessions import (
    TASK_PARAMETERS,
    EpisodeOverError,
    EpisodeSession,
    NotStartedError,
    SessionClosedError,
    SessionError,
    StepView,
    Task,
    TaskError,
)

MAX_ACTION_CHARS = 1 << 20
"""A longer action is refused as malformed (the envs would cut it anyway)."""


class DerlAction(Action):
    """One action: an agent's whole response, or a command (``action_format="command"``), or
    a single-step env's whole answer."""

    text: str = Field(..., max_length=MAX_ACTION_CHARS, description="the action's text")


class DerlObservation(Observation):
    """The env's observation text and the step's primitives and rewards; ``reward`` is the
    Meta-Reward's increment. The same fields are in ``metadata`` too: they travel as fields,
    which every OpenEnv client reads (``openenv`` 0.4 also sends ``metadata``, which older
    servers left off the wire), and :class:`DerlEnvClient` fills ``metadata`` from them."""

    text: str = Field(default="", description="the env's observation")
    primitives: dict[str, float] = Field(default_factory=dict,
                                         description="the card's primitives at this step")
    meta_reward: float = Field(default=0.0, description="the episode's Meta-Reward so far")
    env_reward: float = Field(default=0.0, description="the env's own reward for this step")
    terminated: bool = Field(default=False, description="the episode ended (won, or over)")
    truncated: bool = Field(default=False, description="the episode was cut at the step cap")
    step: int = Field(default=0, description="steps taken in the episode")


class DerlState(State):
    """The session's task and where its episode stands."""

    env_id: str = ""
    level: str | None = None
    split: str | None = None
    reward: str = ""
    seed: int | None = None
    index: int | None = None
    done: bool = False
    meta_reward: float = 0.0


_OPEN = [0]
_OPEN_LOCK = threading.Lock()


def open_envs() -> int:
    """How many envs this process's :class:`DerlEnvironment` sessions hold open."""
    with _OPEN_LOCK:
        return _OPEN[0]


class DerlEnvironment(Environment[DerlAction, DerlObservation, DerlState]):
    """One session's env, made at its first reset (OpenEnv builds an instance for every
    session and for every stateless request, so building one costs nothing)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, task: Task) -> None:
        super().__init__()
        self.task = task
        self._session: EpisodeSession | None = None
        self._closed = False
        self._state = DerlState(env_id=task.env_id, level=task.level, split=task.split,
                                reward=task.reward_expression)

    def reset(self, seed: int | None = None, episode_id: str | None = None,
              **parameters: Any) -> DerlObservation:
        """Start an episode of the task the parameters name (the session's task otherwise)."""
        if self._closed:
            raise SessionClosedError("this session is closed (by its client, or idle past "
                                     "the server's session timeout); open a new one")
        index = parameters.pop("index", None)
        task = self.task.with_parameters(parameters)
        if self._session is None or self._session.task != task:
            self._close_session()
            self._session = EpisodeSession(task)
            with _OPEN_LOCK:
                _OPEN[0] += 1
            self.task = task
        view = self._session.reset(seed=seed, index=index)
        self._state = DerlState(episode_id=episode_id or str(uuid.uuid4()), step_count=0,
                                env_id=task.env_id, level=task.level, split=task.split,
                                reward=task.reward_expression, seed=seed, index=index)
        return _observation(view)

    def step(self, action: DerlAction, timeout_s: float | None = None,
             **kwargs: Any) -> DerlObservation:
        """Play one action of the running episode."""
        if self._closed:
            raise SessionClosedError("this session is closed (by its client, or idle past "
                                     "the server's session timeout); open a new one")
        if self._session is None:
            raise NotStartedError("no episode is running; reset first")
        view = self._session.step(action.text)
        self._state.step_count = view.step
        self._state.done = view.done
        self._state.meta_reward = view.meta_reward
        return _observation(view)

    @property
    def state(self) -> DerlState:
        """The session's task and where its episode stands."""
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        """The env id, its family and the primitives its observations carry."""
        spec = self.task.spec
        return EnvironmentMetadata(
            name=self.task.env_id, version=__version__, author="derl-bench",
            description=(f"derl-bench {self.task.env_id} ({spec.name} family, "
                         f"{'multi-turn' if spec.multi_turn else 'single-step'}); primitives: "
                         f"{', '.join(spec.primitives)}"))

    def _close_session(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            session.close()
            with _OPEN_LOCK:
                _OPEN[0] -= 1

    def close(self) -> None:
        """Close the env; later calls get :class:`SessionClosedError`. Idempotent."""
        self._closed = True
        self._close_session()


def _observation(view: StepView) -> DerlObservation:
    return DerlObservation(text=view.observation, reward=view.reward, done=view.done,
                           metadata=view.metadata(), **view.metadata())


class QuietDisconnect:
    """ASGI middleware: a WebSocket whose client left before the server's closing frame is
    over, not an error. (OpenEnv's ``/ws`` route closes the socket after the client's
    ``close`` message and expects a ``RuntimeError`` there; Starlette raises
    ``WebSocketDisconnect``, which would be logged as a crash of the app.)"""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        from starlette.websockets import WebSocketDisconnect

        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:
            if scope.get("type") != "websocket":
                raise


BINARY_FRAME_MESSAGE = ("binary frames are not supported; send each message as JSON text "
                        "(the session is closed)")
"""The error frame's message for a binary WebSocket frame."""


class TextFramesOnly:
    """ASGI middleware: a binary WebSocket frame ends its session with an error frame that says
    so (:data:`BINARY_FRAME_MESSAGE`, code ``SESSION_ERROR``) and close code 1003 (unsupported
    data). OpenEnv's ``/ws`` route reads text only, and a binary frame failed inside
    Starlette with a ``KeyError``, which reached the client as ``SESSION_ERROR: 'text'``."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "websocket":
            await self.app(scope, receive, send)
            return
        refused = False

        async def text_only() -> Any:
            nonlocal refused
            message = await receive()
            if message.get("type") == "websocket.receive" and message.get("text") is None:
                refused = True
                frame = WSErrorResponse(data={"message": BINARY_FRAME_MESSAGE,
                                              "code": WSErrorCode.SESSION_ERROR})
                await send({"type": "websocket.send", "text": frame.model_dump_json()})
                # To the route the client has left: it closes the session and its env, as for
                # any client that goes away.
                return {"type": "websocket.disconnect", "code": 1003}
            return message

        async def closing(message: Any) -> None:
            if refused and message.get("type") == "websocket.close":
                message = {**message, "code": 1003, "reason": "binary frames are not supported"}
            await send(message)

        await self.app(scope, text_only, closing)


_STATUS = {TaskError: 400, NotStartedError: 409, EpisodeOverError: 409, SessionClosedError: 410}


async def _session_error(request: Request, exc: Exception) -> JSONResponse:
    status = next((code for cls, code in _STATUS.items() if isinstance(exc, cls)), 400)
    return JSONResponse(status_code=status,
                        content={"detail": str(exc), "error": type(exc).__name__})


def build_app(env_id: str, max_sessions: int = 8, session_timeout: float | None = 600.0,
              **task: Any) -> FastAPI:
    """The OpenEnv app serving ``env_id`` (:class:`TaskError` for an unknown id, level, split
    or reward: checked before anything is served). ``task``: the sessions' default
    :class:`~derl_bench.integrations.sessions.Task` fields besides the env id."""
    if max_sessions < 1:
        raise TaskError(f"max_sessions must be at least 1, not {max_sessions}")
    if session_timeout is not None and session_timeout <= 0:
        raise TaskError(f"session_timeout must be positive, not {session_timeout}")
    defaults = Task(env_id).with_parameters(
        {k: v for k, v in task.items() if k in TASK_PARAMETERS})
    unknown = sorted(set(task) - set(TASK_PARAMETERS))
    if unknown:
        raise TaskError(f"unknown task field(s) {', '.join(unknown)}")
    defaults.make_kwargs()
    if defaults.split is not None:
        # The split's items, as a reset would play them: a split the env lacks is refused now,
        # not by every reset after the server says it is serving.
        defaults.items()
    defaults.compile_reward()
    app = create_app(functools.partial(DerlEnvironment, defaults), DerlAction, DerlObservation,
                     env_name=env_id,
                     concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions,
                                                          session_timeout=session_timeout))
    app.add_exception_handler(SessionError, _session_error)
    app.add_middleware(QuietDisconnect)
    app.add_middleware(TextFramesOnly)

    @app.get("/derl/status", tags=["Health"])
    def status() -> dict[str, Any]:
        """The served env id, the session limit and how many envs are open."""
        return {"env_id": env_id, "max_sessions": max_sessions, "open_envs": open_envs()}

    return app


class DerlEnvClient(EnvClient[DerlAction, DerlObservation, DerlState]):
    """OpenEnv's WebSocket client for a derl-bench server: ``step`` takes a
    :class:`DerlAction` (or its text) and returns a ``StepResult`` of
    :class:`DerlObservation`."""

    async def _send_and_receive(self, message: dict[str, Any]) -> dict[str, Any]:
        # A server at capacity answers the connection itself: an error frame, then a close. When
        # both arrive before this client sends, the send fails on the closed socket; the frame
        # is still in the receive buffer, so the refusal is read and raised as any error frame.
        from websockets.exceptions import ConnectionClosed

        try:
            return await super()._send_and_receive(message)
        except ConnectionClosed:
            socket: Any = getattr(self, "_ws", None)
            if socket is None:
                raise
            try:
                response = json.loads(await socket.recv())
            except ConnectionClosed:
                raise ConnectionError("the server closed the session") from None
            finally:
                self._ws = None
            if response.get("type") == "error":
                data = response.get("data", {})
                raise RuntimeError(f"Server error: {data.get('message', 'Unknown error')} "
                                   f"(code: {data.get('code', 'UNKNOWN')})") from None
            raise ConnectionError("the server closed the session") from None

    def _step_payload(self, action: DerlAction | str) -> dict[str, Any]:
        text = action.text if isinstance(action, DerlAction) else action
        return {"text": text}

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[DerlObservation]:
        observation = DerlObservation.model_validate(payload.get("observation", {}))
        observation.reward = payload.get("reward")
        observation.done = bool(payload.get("done", False))
        observation.metadata = observation.model_dump(
            include={"primitives", "meta_reward", "env_reward", "terminated", "truncated",
                     "step"})
        return StepResult(observation=observation, reward=payload.get("reward"),
                          done=bool(payload.get("done", False)))

    def _parse_state(self, payload: dict[str, Any]) -> DerlState:
        return DerlState.model_validate(payload)


__all__ = ["BINARY_FRAME_MESSAGE", "MAX_ACTION_CHARS", "DerlAction", "DerlEnvClient",
           "DerlEnvironment", "DerlObservation", "DerlState", "build_app", "open_envs"]
