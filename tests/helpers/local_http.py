"""A local HTTP server for the tests of OpenAI-compatible clients: a request handler class served on a free port of
127.0.0.1, in a thread of this process, until the generator is closed."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator


def serve(handler: type[http.server.BaseHTTPRequestHandler], *, backlog: int = 5) -> Iterator[str]:
    """Yield the server's base URL; ``backlog`` is the listen queue (Offline load opens every connection at once,
    and the default 5 resets the rest)."""
    server_class = type("Server", (http.server.ThreadingHTTPServer,), {"request_queue_size": backlog})
    httpd = server_class(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
