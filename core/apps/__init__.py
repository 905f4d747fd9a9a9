"""Applications: thin faces (ContextCompacter, compact_messages, ResearchSession, transcripts)
over pipelines."""
