"""Input and output formats: records, messages, compacted histories, HTML, system prompts."""
