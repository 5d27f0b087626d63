"""Perturbations, one concept in one package.

`spec` what a world's `perturbations:` say; `presets` named bundles of them; `injections` the built-in injection
texts; `planner` which perturbations fire on a call; `phases` the two phases the simulator calls once each (before
and after the world model); `apply` what each fault kind does to a call. `world.py` imports only `spec`, `presets`
and `injections`, none of which imports `world.py`, so there is no import cycle.
"""
