"""The `knee` command line. Thin: each room registers its own commands in ``_ROOMS`` below."""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="knee",
    help="Find the concurrency knee of an LLM inference server, and say what to run at.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# The one extension point for commands: each module here defines ``register(app)``.
_ROOMS: tuple[str, ...] = (
    "llm_knee.commands.cli",  # find, analyze
    "llm_knee.plan.cli",  # plan
    "llm_knee.sim.cli",  # serve-sim
    "llm_knee.sim.simulate_cmd",  # simulate
)


def _register_all() -> None:
    for name in _ROOMS:
        importlib.import_module(name).register(app)


_register_all()


def main() -> None:
    app()
