"""Perturbations, one concept in one package: `spec` (what a world's `perturbations:` say), `presets` (named bundles
of them), `planner` (which fire on a call), `apply` (what each kind does to the call), `injections` (the built-in
injection texts). `world.py` reads `spec`, `presets` and `injections`; only the simulator uses `planner` and `apply`,
which read the world's tools: nothing here imports `world.py` except `apply`, so there is no import cycle.
"""
