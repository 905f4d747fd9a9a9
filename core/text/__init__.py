"""Text primitives: tokens, spans, sentences, terms, similarity, relevance, the fact grammar."""
