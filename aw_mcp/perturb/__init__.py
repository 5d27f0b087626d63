"""Perturbations, one concept in one package.

`spec` what a world's `perturbations:` say; `presets` named bundles of them; `injections` the built-in injection
texts; `planner` which perturbations fire on a call; `kinds` one entry per fault kind (its spec, phase, effect and
scorecard grade); `phases` runs the phases the simulator calls (before and after the world model) over those
entries; `apply` the helpers the kinds apply with. `world.py` imports only `spec`, `presets` and `injections`, none
of which imports `world.py`, so there is no import cycle.
"""
