"""compress.eight_segment and the algorithms that serve it alone: the history's model (`history`),
the 8-section summary (`conversation`), the people template (`chat_summary`), kinds of history
(`kinds`), role handoffs (`roles`) and the file memory (`file_memory`). One home: these modules
import each other, nothing outside this package imports them but the plugin index."""
