"""The MCP server at ``/mcp``: the tenant's catalogue for any MCP client (DESIGN.md, "Agent interop")."""

from gateway.mcp.server import PATH, McpEndpoint

__all__ = ["PATH", "McpEndpoint"]
