"""A world file read and checked whole: the spec, then what needs the prompt layer (size, grammar warnings)."""
