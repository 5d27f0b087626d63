"""The package version, in its own leaf module so that any stage may read it without importing `aw_mcp`."""

__version__ = "0.1.0"
