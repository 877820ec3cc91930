"""A TCP proxy on loopback that tests cut: the network between a client and a server.

Why: a SIGKILL or a restart is one fault; a connection that drops while both ends live
on (a switch, a firewall, a half-open socket) is another, and the metastore and broker
clients handle it on other paths (retries, resyncs, unknown outcomes). ``cut()``
closes every connection and refuses new ones until ``restore()``; ``drop_when`` cuts
one connection when what its client sends matches (e.g. the first WAITAOF).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

from pulsar_txn.harness.ports import free_port


class TcpProxy(threading.Thread):
    """Forwards 127.0.0.1:``port`` to 127.0.0.1:``target_port``."""

    def __init__(self, target_port: int,
                 drop_when: Callable[[bytes], bool] | None = None) -> None:
        super().__init__(daemon=True)
        self.port, self.target = free_port(), target_port
        self.open = True
        self.drop_when = drop_when
        self.dropped = 0  # connections drop_when cut
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._srv = socket.create_server(("127.0.0.1", self.port))

    def run(self) -> None:
        while True:
            try:
                client, _ = self._srv.accept()
            except OSError:
                return
            if not self.open:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream, True),
                             daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False),
                             daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, from_client: bool) -> None:
        try:
            while data := src.recv(65536):
                if from_client and self.drop_when is not None and self.drop_when(data):
                    self.dropped += 1
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.close()
            except OSError:
                pass

    def cut(self) -> None:
        """Every connection closes; new ones are refused until ``restore()``."""
        self.open = False
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass

    def restore(self) -> None:
        self.open = True

    def close(self) -> None:
        self.cut()
        self._srv.close()
