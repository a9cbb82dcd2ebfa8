"""Scenario events: scheduled and triggered effects, NPC colleagues, and checks."""
