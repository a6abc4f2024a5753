"""``mvflow docs serve``: the generated site over HTTP on localhost (stdlib ``http.server``)."""

from __future__ import annotations

import functools
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable

from compiler.errors import Problem, RunError


class _Handler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        pass

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "no-cache")
        super().end_headers()


def serve_docs(directory: Path, port: int, echo: Callable[[str], None] = print, host: str = "127.0.0.1") -> None:
    """Serve ``directory`` until interrupted; port 0 picks a free one (the URL is printed)."""
    if not (directory / "index.html").is_file():
        raise RunError(Problem(f"no docs site in {directory}", hint="run `mvflow docs generate` first", code="no-docs"))
    try:
        server = ThreadingHTTPServer((host, port), functools.partial(_Handler, directory=str(directory)))
    except OSError as exc:
        raise RunError(Problem(f"cannot listen on {host}:{port}: {exc.strerror}", hint="pick another --port", code="port")) from exc
    echo(f"serving {directory} on http://{host}:{server.server_port}/ (Ctrl+C to stop)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
