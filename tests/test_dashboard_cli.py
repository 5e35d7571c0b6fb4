"""`threshold dashboard` refuses bad input with one line and exit status 2, before serving."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest


def dashboard(args, tmp_path):
    return subprocess.run(
        [sys.executable, "-m", "threshold", "dashboard", *args],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
        env=dict(os.environ, THRESHOLD_STORAGE=f"sqlite:///{tmp_path}/s.db"),
    )  # fmt: skip


def one_error_line(proc) -> str:
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: ")
    return line


def test_port_in_use(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = one_error_line(dashboard(["--port", str(port)], tmp_path))
    assert f"error: port {port} on 127.0.0.1 is in use: choose another, e.g. --port " in line
    suggested = int(line.rsplit("--port ", 1)[1])
    assert suggested != port
    assert not (tmp_path / "s.db").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--storage", "not-a-url", "--port", "0"], "'not-a-url' is not a database URL"),
        (["--port", "0"], "does not exist"),  # $THRESHOLD_STORAGE names a missing file
        (["--port", "70000"], "--port 70000 is not allowed: use 1 to 65535"),
        (["--host", "no-such-host.invalid"], "cannot be resolved"),
    ],
)
def test_bad_input(tmp_path, args, message):
    assert message in one_error_line(dashboard(args, tmp_path))
    assert not (tmp_path / "s.db").exists()
