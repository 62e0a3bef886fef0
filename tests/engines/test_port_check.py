"""check_port_free: a listener is refused; a server that just stopped (TIME_WAIT) is not."""

from __future__ import annotations

import socket
import time

import pytest

from draftlab.engines.launch import check_port_free
from draftlab.errors import DraftlabError


def test_listener_refused():
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        with pytest.raises(DraftlabError, match=f"port {busy.getsockname()[1]} on 127.0.0.1 is in use"):
            check_port_free("127.0.0.1", busy.getsockname()[1])


def test_port_of_a_server_that_closed_its_connections_is_free():
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = server.accept()
    conn.close()  # the server side closes first: its end of the connection stays in TIME_WAIT
    time.sleep(0.05)
    client.close()
    server.close()
    check_port_free("127.0.0.1", port)  # the next engine on this port (as sweep launches them) may start
