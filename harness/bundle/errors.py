"""The bundle's one error type (stdlib only, so any reader of a bundle's parts can raise it)."""


class BundleError(ValueError):
    """A folder that is not a readable results bundle; the message names the file and why."""
