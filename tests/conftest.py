"""Shared fixtures: a real PostgreSQL server, started for the test session when a test asks."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pg_bin() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return os.path.dirname(found[-1]) if found else None


@pytest.fixture(scope="session")
def postgres_url():
    """URL of a throwaway PostgreSQL server (Debian's package; `.ci/run` installs it)."""
    bindir = _pg_bin()
    if bindir is None:
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL is not installed: .ci/run should have installed it")
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.fail("psycopg is not installed: pip install -e '.[dev]'")
    root = tempfile.mkdtemp(prefix="threshold-pg-")
    data = os.path.join(root, "data")
    as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if as_postgres:
        shutil.chown(root, "postgres")
    port = _free_port()

    def pg(*args):
        subprocess.run([*as_postgres, *args], check=True, capture_output=True)

    pg(f"{bindir}/initdb", "-D", data, "-A", "trust", "-U", "postgres")
    pg(
        f"{bindir}/pg_ctl", "-D", data, "-l", os.path.join(root, "log"), "-w", "start",
        "-o", f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c max_connections=100",
    )  # fmt: skip
    try:
        for _ in range(50):
            ok = subprocess.run(
                [f"{bindir}/pg_isready", "-h", "127.0.0.1", "-p", str(port)], capture_output=True
            )
            if ok.returncode == 0:
                break
            time.sleep(0.2)
        pg(f"{bindir}/createdb", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "threshold")
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/threshold"
    finally:
        subprocess.run(
            [*as_postgres, f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "stop"],
            capture_output=True,
        )
        shutil.rmtree(root, ignore_errors=True)
