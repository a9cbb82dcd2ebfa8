"""Installed agents: the real Claude Code and Codex CLIs, pinned, run headless by the platform."""
