"""A bounded HTTP server on 127.0.0.1 serving a folder, and torchvision pointed at it.

``selfcaps data get`` is tested against files in the official formats served from the
test's own folder: torchvision's class attributes that hold its URLs and md5 checksums
(``mirrors``/``resources``, ``url``/``tgz_md5``, ``split_list``) are replaced by ones naming
this server and the md5s of the served files. Nothing leaves the machine.
"""

from __future__ import annotations

import hashlib
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

#: Proxy variables that would send a request for 127.0.0.1 elsewhere.
PROXY_VARIABLES = (
    "http_proxy",
    "HTTP_PROXY",
    "https_proxy",
    "HTTPS_PROXY",
    "all_proxy",
    "ALL_PROXY",
)


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        """No request log on stderr (the tests read stderr)."""


def md5_of(path: Path) -> str:
    """The md5 of a file's bytes, as torchvision checks it."""
    return hashlib.md5(path.read_bytes()).hexdigest()


@contextmanager
def serve(directory: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Serve ``directory`` on 127.0.0.1 (a free port) until the block ends; yields its base URL.

    Proxies are switched off for the block and sockets time out after 10 s, so a request
    can neither leave the machine nor hang the test.
    """
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    before = socket.getdefaulttimeout()
    socket.setdefaulttimeout(10)
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_QuietHandler, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
        socket.setdefaulttimeout(before)


def point_mnist_at(monkeypatch: pytest.MonkeyPatch, cls: type, base_url: str, served: Path) -> None:
    """An MNIST-family class downloads its four ``.gz`` files from ``base_url`` (``served/``)."""
    names = [name for name, _ in cls.resources]
    monkeypatch.setattr(cls, "mirrors", [base_url])
    monkeypatch.setattr(cls, "resources", [(n, md5_of(served / n)) for n in names])
