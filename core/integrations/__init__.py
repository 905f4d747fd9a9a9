"""Integrations: compactor's faces offered to other programs through their protocols (the MCP
server). Each module imports its optional dependency itself, so `import compactor` never does."""
