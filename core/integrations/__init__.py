"""Integrations: compactor where agents live (the MCP server, LangChain, the OpenAI Agents SDK).
Each module imports its optional dependency (an extra) itself, so `import compactor` never does."""
