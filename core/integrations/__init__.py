"""Adapters for agent frameworks (optional extras; `import compactor` loads none of them)."""
