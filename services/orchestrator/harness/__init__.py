"""Harness configurations: presets (YAML), their validation, the system-prompt templates."""
