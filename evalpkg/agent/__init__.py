"""The agent runtime: a guarded toolkit over the eval DB, a simulated user, and a small ReAct loop."""
