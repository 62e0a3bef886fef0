"""check_port_free: a listener is refused; a server that just stopped (TIME_WAIT) is not."""

from __future__ import annotations

import errno
import socket
import time
from pathlib import Path

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


def _time_wait_ports() -> set[int]:
    """Local ports of this network namespace's IPv4 TCP connections in TIME_WAIT (state 06)."""
    ports = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "06":
            ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


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

    # The situation is real: the server's end sits in TIME_WAIT on this port (it lasts ~60 s), so
    # a plain bind, without SO_REUSEADDR, is refused.
    if Path("/proc/net/tcp").exists():
        deadline = time.monotonic() + 5
        while port not in _time_wait_ports() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert port in _time_wait_ports(), f"no TIME_WAIT connection on port {port}"
    with socket.socket() as plain, pytest.raises(OSError) as refused:
        plain.bind(("127.0.0.1", port))
    assert refused.value.errno == errno.EADDRINUSE

    check_port_free("127.0.0.1", port)  # the next engine on this port (as sweep launches them) may start
