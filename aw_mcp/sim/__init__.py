"""The simulation at run time: one call through the pipeline (`simulator.py`, `call.py`), the faults on it
(`fault_planner.py`, `fault_kinds.py`, `fault_phases.py`, `fault_apply.py`), world sessions and their registry, the
ledger, progress, and the world set-up shared by the commands, `Env` and OpenEnv (`world_setup.py`)."""
