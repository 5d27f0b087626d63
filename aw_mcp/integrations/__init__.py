"""Other frameworks' environments backed by a world (OpenEnv)."""
