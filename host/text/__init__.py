"""Text analysis shared by the stores and the search: the searchable text of an entry
(`searchable`), tokens, query terms and keyword coverage (`keyword`), BM25 on the keyword
index's scale (`bm25`). A leaf: it imports nothing of `host`, so a store uses it without
importing the search."""
