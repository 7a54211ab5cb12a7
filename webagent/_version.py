"""The package version (kept equal to pyproject.toml by tests/test_public_api.py)."""

__version__ = "0.1.0"
