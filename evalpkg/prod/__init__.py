"""The simulated production HIS database."""
