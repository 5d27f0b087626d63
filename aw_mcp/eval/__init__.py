"""Reading trajectories afterwards: the robustness scorecard, text and HTML reports, the trained judge protocol and
AgentWorldBench runs."""
