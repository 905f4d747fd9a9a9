"""The LLM service: an OpenAI-compatible client and the guarded call every LLM step goes through."""
