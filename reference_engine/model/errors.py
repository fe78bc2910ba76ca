"""The one error a model source raises when it cannot be loaded."""

from __future__ import annotations


class ModelLoadError(RuntimeError):
    """A model could not be loaded. The message names the source (path or model name)
    and what is wrong with it, so an operator can fix it without a traceback."""
