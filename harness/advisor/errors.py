"""The advisor's one error type (bundles that cannot be read raise the bundle's own)."""


class AdvisorError(ValueError):
    """Input the advisor cannot work from; the message says what is wrong and where."""
