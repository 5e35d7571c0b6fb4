"""``threshold dashboard``: optuna-dashboard on a study storage, with notes and checkpoints."""

from __future__ import annotations

import errno
import socket
from socketserver import ThreadingMixIn
from typing import Annotated
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

import typer
from optuna_dashboard import wsgi

from threshold.cli.common import Storage, run_guarded
from threshold.config import resolve_storage
from threshold.errors import ConfigError
from threshold.report.dashboard_note import NOTE_RENDER
from threshold.search.notes import write_all_notes
from threshold.search.study import artifact_store, open_storage


def dashboard(
    storage: Storage = None,
    port: Annotated[int, typer.Option(help="Port to listen on; 0 picks a free one.")] = 8080,
    host: Annotated[
        str, typer.Option(help="Address to listen on; 0.0.0.0 for every interface.")
    ] = "127.0.0.1",
) -> None:
    """Browse the studies in optuna-dashboard: trials, each study's estimate note and transition
    curve, and the checkpoints in the artifact store."""

    def body():
        if not 0 <= port <= 65535:
            raise ConfigError(f"--port {port} is not allowed: use 1 to 65535 (0: any free port)")
        server = _listen(host, port)  # first: a taken port fails before anything is written
        try:
            url = resolve_storage(storage)
            db = open_storage(url, create=False)  # a missing storage fails before any note
            studies = write_all_notes(db, NOTE_RENDER)
            server.set_app(wsgi(db, artifact_store=artifact_store(url)))
            base = f"http://{host}:{server.server_port}/"
            typer.echo(
                f"optuna-dashboard on {url} ({len(studies)} studies) at {base} (Ctrl-C to stop)"
            )
            # Each study's note first: optuna-dashboard opens a study on its generic panels.
            for name, study_id in studies:
                typer.echo(f"  {name}: {base}dashboard/studies/{study_id}/note")
            server.serve_forever()
        except KeyboardInterrupt:
            typer.echo("dashboard stopped", err=True)
        finally:
            server.server_close()

    run_guarded(body)


def _listen(host: str, port: int):
    """A threaded WSGI server bound to (host, port), app not yet set; a bind failure becomes a
    ConfigError naming the port or host and a fix."""

    class Server(ThreadingMixIn, WSGIServer):
        daemon_threads = True  # Ctrl-C does not wait for open browser connections

    class QuietHandler(WSGIRequestHandler):
        def log_message(self, format, *args):  # one line per request drowns the URL
            pass

    try:
        return Server((host, port), QuietHandler)
    except socket.gaierror:
        raise ConfigError(
            f"--host {host!r} cannot be resolved: use an IPv4 address such as 127.0.0.1"
        ) from None
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            free = _free_port_after(host, port)
            other = f"--port {free}" if free else "--port 0 (any free port)"
            raise ConfigError(
                f"port {port} on {host} is in use: choose another, e.g. {other}"
            ) from None
        if e.errno == errno.EACCES:
            raise ConfigError(
                f"port {port} on {host} needs root (ports below 1024 are privileged): use a port "
                "above 1023, e.g. --port 8080"
            ) from None
        if e.errno == errno.EADDRNOTAVAIL:
            raise ConfigError(
                f"--host {host} is not an address of this machine: use 127.0.0.1, or 0.0.0.0 "
                "for every interface"
            ) from None
        raise ConfigError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


def _free_port_after(host: str, port: int, tries: int = 50) -> int | None:
    """The first port after ``port`` that binds on ``host``, or None."""

    for candidate in range(port + 1, min(port + 1 + tries, 65536)):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server does
            try:
                s.bind((host, candidate))
            except OSError:
                continue
            return candidate
    return None
