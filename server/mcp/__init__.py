"""The MCP surface (tools, resources, prompt). Imports the core, never another surface."""
