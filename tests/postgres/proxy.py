"""A TCP proxy between the tests and PostgreSQL that can lose a COMMIT, in either direction.

``arm("request")``: the next client packet carrying a COMMIT is dropped and the
connection cut, so the server never commits (the transaction rolls back).
``arm("reply")``: the COMMIT goes through; once the server's reply carries the
COMMIT command tag (the commit has happened), the connection is cut before the
client sees it: the client cannot tell whether its transaction committed.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Literal

Mode = Literal["request", "reply"]


class CommitLosingProxy:
    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.mode: Mode | None = None
        self.fired = threading.Event()
        self._lock = threading.Lock()
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, mode: Mode) -> None:
        with self._lock:
            self.mode = mode
            self.fired.clear()

    def close(self) -> None:
        self._stop = True
        self.listener.close()

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            state = {"commit_sent": False}
            threading.Thread(target=self._pump, args=(client, server, True, state), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False, state), daemon=True).start()

    def _cut(self, a: socket.socket, b: socket.socket) -> None:
        for s in (a, b):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def _pump(self, src: socket.socket, dst: socket.socket, to_server: bool, state: dict[str, bool]) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                with self._lock:
                    mode = self.mode
                    if to_server and mode is not None and b"COMMIT" in data:
                        if mode == "request":
                            self.mode = None
                            self.fired.set()
                            self._cut(src, dst)
                            return
                        state["commit_sent"] = True
                    if not to_server and mode == "reply" and state["commit_sent"] and b"COMMIT\x00" in data:
                        self.mode = None
                        self.fired.set()
                        self._cut(src, dst)
                        return
                dst.sendall(data)
        except OSError:
            pass
        finally:
            self._cut(src, dst)
