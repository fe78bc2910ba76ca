"""The deployment facts a run records in run.json (`harness.bundle.deployment`).

For the bundled engine or simulator: the configuration `kvscope engine serve` will build
from the very argv kvscope run gives it, built here by the engine's own declarations
(`reference_engine.engine_args`) and recorded field by field. For a --target: only what
the server stated about itself in /v1/models (the served model's id and max_model_len).
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import Any, NoReturn

from harness.bundle.deployment import BUNDLED, SERVER_MODELS, DeploymentFacts, Fact, of_config
from reference_engine.engine_args import add_engine_args, engine_config_from_args, simulator_config_from_args


class _ArgvParser(argparse.ArgumentParser):
    """Raises instead of printing and exiting: a bad flag is the caller's error to report."""

    def error(self, message: str) -> NoReturn:
        raise ValueError(f"engine flags do not parse: {message}")


def bundled_facts(model: str | None, engine_argv: list[str]) -> DeploymentFacts:
    """What the bundled engine will run with, given `--model MODEL` and `engine_argv`
    (ValueError when the flags do not parse)."""
    parser = _ArgvParser(prog="kvscope engine serve", add_help=False)
    add_engine_args(parser)
    ns = parser.parse_args([*(["--model", model] if model else []), *engine_argv])
    engine, sim = engine_config_from_args(ns), simulator_config_from_args(ns)
    server = "bundled engine" if sim is None else "bundled simulator"
    return of_config(server, asdict(engine), None if sim is None else asdict(sim), BUNDLED)


def stated_facts(models: list[dict[str, Any]], requested: str | None) -> DeploymentFacts:
    """What a --target server stated in /v1/models about the model the run requests (the
    one named, else the first listed)."""
    card = next(
        (c for c in models if c.get("id") == requested), None if requested else next(iter(models), None)
    )
    engine: dict[str, Fact] = {}
    if card is not None and isinstance(card.get("id"), str):
        engine["model"] = Fact(card["id"], SERVER_MODELS)
    limit = card.get("max_model_len") if card is not None else None
    if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
        engine["max_model_len"] = Fact(limit, SERVER_MODELS)
    return DeploymentFacts("target", engine)
