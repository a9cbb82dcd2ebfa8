"""Judges: world checks resolved through the tools service, and the agentic generative reward
model (K3 report §4.1.2)."""
