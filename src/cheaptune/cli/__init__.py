"""Thin CLI entry points: validate -> build -> run -> clean up. The library never imports this package.

Each module here with a `register(app)` function adds its commands; main.py finds them, so adding a
command is adding a module. Modules import only typer at top level so `cheaptune --help` stays fast.
"""
