"""The base every stage stands on: user errors, settings (`AW_*`), private files, redaction, JSON lines, the strict
model for user input, and what goes into and out of a world model (`model_io.py`). Imports nothing else of aw_mcp."""
