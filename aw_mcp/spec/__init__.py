"""What a world file says: the world model (`world.py`), YAML with `file:line` errors, JSON-Schema walking and checks,
the domains and their action spaces, the fault and injection specs, the bundled worlds and prompts."""
