"""Adapters to agent frameworks (optional extras); `import compactor` imports none of them."""
