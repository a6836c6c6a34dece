"""The package's version, in one place (``pyproject.toml`` reads it; the cache keys and results.json record it)."""

__version__ = "0.1.0"
