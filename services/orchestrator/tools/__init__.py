"""Tool sets: the harness-native built-in tools and the world's app tools (MCP)."""
