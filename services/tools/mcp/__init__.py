"""Each world's mock apps served as MCP tools over streamable HTTP (``/worlds/{id}/mcp``)."""
