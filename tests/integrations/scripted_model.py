"""A scripted chat model behind a real OpenAI-compatible HTTP endpoint on 127.0.0.1.

The verifiers tests drive verifiers' real rollout loop and real OpenAI client; only the model
is replaced, by a script: each request's answer is the next line of the script (the last one
repeated once it runs out). Every request's messages are kept in ``requests``.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from conftest import serve_http


class ScriptedModel:
    """The replies, in order, and the requests that got them."""

    def __init__(self, replies: Sequence[str]) -> None:
        self.replies = list(replies)
        self.requests: list[list[dict[str, Any]]] = []
        self._lock = threading.Lock()

    def answer(self, messages: list[dict[str, Any]]) -> str:
        with self._lock:
            self.requests.append(messages)
            index = min(len(self.requests) - 1, len(self.replies) - 1)
            return self.replies[index]


def _handler(model: ScriptedModel) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            text = model.answer(body["messages"])
            reply = {
                "id": "scripted", "object": "chat.completion", "created": 0,
                "model": body.get("model", "scripted"),
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": text}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


@contextlib.contextmanager
def scripted_endpoint(model: ScriptedModel) -> Iterator[str]:
    """Serve ``model`` on 127.0.0.1; yields the base URL (``.../v1``)."""
    with serve_http(_handler(model)) as url:
        yield f"{url}/v1"
