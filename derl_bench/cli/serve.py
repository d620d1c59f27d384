"""``derl-bench serve ENV_ID``: one env id over HTTP and WebSocket, as an OpenEnv server
(:mod:`derl_bench.integrations.openenv_server`, the ``[serve]`` extra)."""

from __future__ import annotations

import argparse
import errno
import socket

from derl_bench.cli._errors import CommandError


def _listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port``, or :class:`CommandError` naming the port. Bound here,
    before the command says it is serving, and handed to uvicorn, so no other process can
    take the port in between."""
    # As uvicorn binds it itself (uvicorn.Config.bind_socket), without its exit on failure.
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise CommandError(f"--port {port}: the port is already in use on {host} (another "
                               "server?); choose another --port") from None
        raise CommandError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def _run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from derl_bench.integrations.openenv_server import build_app
    except ImportError as exc:
        raise CommandError(f"serving needs the [serve] extra ({exc}): "
                           "pip install 'derl-bench[serve]'") from None
    if not 0 <= args.port <= 65535:
        raise CommandError(f"--port must be 0..65535, not {args.port}")
    if not args.session_timeout >= 0:  # NaN too
        raise CommandError("--session-timeout must be a number of seconds > 0, or 0 for "
                           f"never, not {args.session_timeout:g}")
    timeout = args.session_timeout if args.session_timeout > 0 else None
    app = build_app(args.env_id, max_sessions=args.max_sessions, session_timeout=timeout,
                    level=args.level, split=args.split, reward=args.reward,
                    max_episode_steps=args.max_episode_steps,
                    action_format=args.action_format)
    sock = _listen(args.host, args.port)
    port = sock.getsockname()[1]  # the one the OS chose for --port 0
    server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=port,
                                           log_level=args.log_level))
    print(f"serving {args.env_id} on http://{args.host}:{port} (WebSocket /ws, "
          f"at most {args.max_sessions} sessions)", flush=True)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        # uvicorn has shut down on the signal and raised it again; as uvicorn.run does, that
        # is the end of serving, not an error
        pass
    finally:
        sock.close()
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``derl-bench serve``."""
    parser = sub.add_parser(
        "serve", help="serve an env over HTTP and WebSocket (OpenEnv)",
        description="Serve one env id as an OpenEnv server: each WebSocket session (/ws) plays "
        "its own env; a reset may set level, split, index, reward, semantics, "
        "max_episode_steps and action_format. Every observation carries the step's "
        "primitives and Meta-Reward. See docs/serving.md.")
    parser.add_argument("env_id", help="a derl-bench env id, e.g. derl/ALFWorld-v0")
    parser.add_argument("--port", type=int, default=8000, help="TCP port (default 8000)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1; 0.0.0.0 in a container)")
    parser.add_argument("--max-sessions", type=int, default=8,
                        help="concurrent sessions, one env each (default 8)")
    parser.add_argument("--session-timeout", type=float, default=600.0,
                        help="close a session idle this many seconds (default 600; 0: never)")
    parser.add_argument("--level", default=None, help="the sessions' default level")
    parser.add_argument("--split", default=None, help="the sessions' default split")
    parser.add_argument("--reward", default=None,
                        help="the sessions' default Meta-Reward (default: the family's "
                        "success primitive)")
    parser.add_argument("--max-episode-steps", type=int, default=None,
                        help="step cap of agent envs (default: the card's)")
    parser.add_argument("--action-format", choices=["think-action", "command"], default=None,
                        help="agent envs: whole <think>/<action> responses (default) or bare "
                        "commands")
    parser.add_argument("--log-level", default="warning",
                        choices=["critical", "error", "warning", "info", "debug"],
                        help="uvicorn's log level (default warning)")
    parser.set_defaults(func=_run)
