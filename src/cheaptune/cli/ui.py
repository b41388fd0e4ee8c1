"""`cheaptune ui`: the local, read-only dashboard over the run registry and plan files."""

from __future__ import annotations

from pathlib import Path

import typer

from cheaptune.cli.checks import bounded, path

LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}


def ui_cmd(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on; anything but localhost needs --token."),
    port: int = typer.Option(8765, "--port", callback=bounded(1, 65535), help="Port to listen on."),
    token: str = typer.Option(None, "--token", envvar="CHEAPTUNE_UI_TOKEN",
                              help="Secret every request must carry (required with a non-local --host)."),
    plans: list[Path] = typer.Option(None, "--plans", parser=path, help="Plan file or folder of them (repeatable; default: here)."),
    registry: Path = typer.Option(None, "--registry", parser=path, help="Run registry file (default: runs.sqlite in cheaptune's home)."),
) -> None:
    """Serve a read-only dashboard: runs, one run's live loss and $ curves, compare, plan files."""
    from cheaptune.errors import BadInput

    if host not in LOCAL_HOSTS and not token:
        raise BadInput(f"--host {host} lets other machines in; give --token SECRET (checked on every request), "
                       "or keep the default --host 127.0.0.1")
    if token is not None and len(token) < 8:
        raise BadInput("--token is too short; use at least 8 characters (e.g. `python -c 'import secrets; "
                       "print(secrets.token_urlsafe())'`)")
    for p in plans or []:
        if not p.exists():
            raise BadInput(f"--plans {p} does not exist; give a plan file or a folder of them")
    try:
        import uvicorn

        from cheaptune.runs.registry import default_path
        from cheaptune.ui.app import create_app
    except ImportError as err:
        raise BadInput(f"cheaptune ui needs {err.name}: pip install 'cheaptune[ui]'") from None
    _check_address(host, port)
    app = create_app(registry or default_path(), list(plans or [Path.cwd()]), token=token)
    shown = f"[{host}]" if ":" in host else host
    typer.echo(f"cheaptune ui: http://{shown}:{port}/runs{'?token=' + token if token else ''}  (Ctrl-C stops it)", err=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")


def _check_address(host: str, port: int) -> None:
    """Bind once before serving, so a busy port or an unknown host is one line, not a server log."""
    import socket

    from cheaptune.errors import BadInput

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        with socket.socket(infos[0][0], socket.SOCK_STREAM) as sock:
            sock.bind(infos[0][4])
    except (OSError, UnicodeError) as err:
        raise BadInput(f"cannot listen on {host}:{port} ({err}); pick another --port or --host") from None


def register(app: typer.Typer) -> None:
    app.command("ui")(ui_cmd)
