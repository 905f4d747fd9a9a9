"""The compress.* family: select, the search strategies, map-reduce, topics, the history compressor."""
