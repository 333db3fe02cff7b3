"""Attacks on the front doors' connections: clients that connect and then send too little
(half an HTTP request line, no PostgreSQL startup packet, nothing at all to Flight SQL, or a
request or handshake cut short) are disconnected by the server while every door keeps serving
others; a process out of file descriptors keeps accepting once they are free again."""

from __future__ import annotations

import os
import selectors
import shutil
import socket
import struct
import time

import adbc_driver_flightsql.dbapi as flight_sql
import psycopg
import pytest
import requests
from attack_helpers import assert_alive, assert_victim_untouched, make_victim, wait_for
from conftest import ROOT_ID, ROOT_SECRET

# The server's bounds: HTTP request headers 20 s, PostgreSQL sign-in 10 s, Flight SQL first
# bytes 20 s. A connection still open this long after them was not closed by the server.
GRACE_S = 20


def open_connections(port: int, count: int, first_bytes: bytes = b"") -> list[socket.socket]:
    connections = []
    for _ in range(count):
        conn = socket.create_connection(("127.0.0.1", port), timeout=10)
        if first_bytes:
            conn.sendall(first_bytes)
        connections.append(conn)
    return connections


def pg_startup(user: str, database: str) -> bytes:
    """A PostgreSQL protocol 3.0 StartupMessage."""
    body = struct.pack("!I", 196608)
    for key, value in (("user", user), ("database", database)):
        body += key.encode() + b"\0" + value.encode() + b"\0"
    body += b"\0"
    return struct.pack("!I", len(body) + 4) + body


def serves_every_door(floe) -> None:
    """Each door answers a real client right now."""
    assert requests.get(f"{floe.base}/health", timeout=10).status_code == 200
    with psycopg.connect(host="127.0.0.1", port=floe.pg_port, user=ROOT_ID, password=ROOT_SECRET,
                         dbname=floe.warehouse, connect_timeout=10) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    db_kwargs = {"username": ROOT_ID, "password": ROOT_SECRET}
    with flight_sql.connect(f"grpc://127.0.0.1:{floe.flight_port}", db_kwargs=db_kwargs, autocommit=True) as conn:
        with conn.cursor() as cursor:
            cursor.execute("SELECT 2")
            assert cursor.fetchone() == (2,)


def wait_until_closed(floe, groups: dict[str, tuple[list[socket.socket], float]]) -> dict[str, int]:
    """Reads (and discards) what the server sends on every connection of `groups` (name →
    (connections, seconds the server has to close them)) until the server closes each one or
    its time is up, checking meanwhile that every door serves others. Returns, per group, how
    many connections the server left open."""
    selector = selectors.DefaultSelector()
    for name, (connections, _) in groups.items():
        for conn in connections:
            conn.setblocking(False)
            selector.register(conn, selectors.EVENT_READ, name)
    started = time.monotonic()
    last_check = 0.0
    longest = max(limit for _, limit in groups.values())
    left = {name: 0 for name in groups}
    while selector.get_map() and time.monotonic() - started < longest + 1:
        for key, _ in selector.select(timeout=0.5):
            try:
                data = key.fileobj.recv(65536)
            except OSError:
                data = b""
            if not data:
                selector.unregister(key.fileobj)
        if time.monotonic() - last_check > 3:
            serves_every_door(floe)
            last_check = time.monotonic()
        # A group whose time is up counts its connections still open.
        for key in list(selector.get_map().values()):
            if time.monotonic() - started > groups[key.data][1]:
                selector.unregister(key.fileobj)
                left[key.data] += 1
    for conns, _ in groups.values():
        for conn in conns:
            conn.close()
    return left


def http_port(floe) -> int:
    return int(floe.base.rsplit(":", 1)[1])


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_silent_and_half_open_connections_are_closed_at_every_door(floe):
    victim = make_victim(floe)
    baseline_fds = open_fds(floe.process.pid)
    groups = {
        "HTTP, half a request line": (open_connections(http_port(floe), 200, b"GET /heal"), 20 + GRACE_S),
        "PostgreSQL, no startup packet": (open_connections(floe.pg_port, 50), 10 + GRACE_S),
        "Flight SQL, nothing sent": (open_connections(floe.flight_port, 20), 20 + GRACE_S),
    }
    held = wait_for(lambda: open_fds(floe.process.pid) >= baseline_fds + 200, 10)
    assert held, "the server never held the attacking connections"
    left = wait_until_closed(floe, groups)
    assert left == {name: 0 for name in groups}, f"connections the server left open: {left}"
    # The descriptors came back.
    assert wait_for(lambda: open_fds(floe.process.pid) < baseline_fds + 20, 10), open_fds(floe.process.pid)
    serves_every_door(floe)
    assert_victim_untouched(floe, victim)
    assert_alive(floe)


def test_requests_and_handshakes_cut_short_are_closed_at_every_door(floe):
    """Beyond silence: a client that starts and stops partway through."""
    victim = make_victim(floe)
    headers_then_nothing = (
        b"POST /api/v1/sql HTTP/1.1\r\nHost: floe\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer " + floe.token().encode() + b"\r\nContent-Length: 1000\r\n\r\n{\"sql\": "
    )
    # Before any sign-in: the token endpoint reads its form body.
    token_request_cut_short = (
        b"POST /catalog/v1/oauth/tokens HTTP/1.1\r\nHost: floe\r\n"
        b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\ngrant_type="
    )
    groups = {
        "HTTP, headers then a body cut short": (open_connections(http_port(floe), 10, headers_then_nothing), 20 + GRACE_S),
        "HTTP, unauthenticated token request cut short": (open_connections(http_port(floe), 10, token_request_cut_short), 20 + GRACE_S),
        "PostgreSQL, half a startup packet": (open_connections(floe.pg_port, 10, pg_startup(ROOT_ID, floe.warehouse)[:6]), 10 + GRACE_S),
        "PostgreSQL, startup but no password": (open_connections(floe.pg_port, 10, pg_startup(ROOT_ID, floe.warehouse)), 10 + GRACE_S),
        "Flight SQL, half the HTTP/2 preface": (open_connections(floe.flight_port, 10, b"PRI * HTTP/2.0\r\n"), 20 + GRACE_S),
    }
    left = wait_until_closed(floe, groups)
    assert left == {name: 0 for name in groups}, f"connections the server left open: {left}"
    serves_every_door(floe)
    assert_victim_untouched(floe, victim)
    assert_alive(floe)


def test_the_postgres_door_accepts_again_after_running_out_of_file_descriptors(tmp_path, monkeypatch):
    prlimit = shutil.which("prlimit")
    if prlimit is None:
        pytest.skip("prlimit (util-linux) is not installed")
    import conftest

    wrapper = tmp_path / "floe-low-fds"
    wrapper.write_text(f'#!/bin/sh\nexec {prlimit} --nofile=256:256 {conftest.FLOE_BIN} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setattr(conftest, "FLOE_BIN", str(wrapper))
    floe = conftest.start_floe(tmp_path)
    try:
        victim = make_victim(floe)
        limits = open(f"/proc/{floe.process.pid}/limits").read()
        assert any(line.startswith("Max open files") and "256" in line for line in limits.splitlines()), limits
        log = tmp_path / "floe.log"
        flood = []
        try:
            for _ in range(260):
                flood.append(socket.create_connection(("127.0.0.1", floe.pg_port), timeout=10))
            # The kernel completes connections the server has not accepted yet: held open
            # until the server, accepting them, runs out of descriptors.
            exhausted = wait_for(lambda: "accept a connection failed" in log.read_text(), 20)
        finally:
            # Accepts failed once the server ran out of descriptors (the kernel still queues
            # connections it has not accepted).
            for conn in flood:
                conn.close()
        assert len(flood) == 260
        # Once they are gone, the door accepts and signs in again.
        def signs_in() -> bool:
            try:
                with psycopg.connect(host="127.0.0.1", port=floe.pg_port, user=ROOT_ID, password=ROOT_SECRET,
                                     dbname=floe.warehouse, connect_timeout=5) as conn:
                    return conn.execute("SELECT 1").fetchone() == (1,)
            except psycopg.OperationalError:
                return False

        deadline = time.monotonic() + 20
        while not signs_in():
            assert time.monotonic() < deadline, "the PostgreSQL door no longer signs anyone in"
            time.sleep(0.5)
        assert floe.process.poll() is None, "floe exited"
        assert exhausted, ("the flood never exhausted the descriptors", tmp_path)
        serves_every_door(floe)
        assert_victim_untouched(floe, victim)
        assert_alive(floe)
    finally:
        conftest.stop_floe(floe)
