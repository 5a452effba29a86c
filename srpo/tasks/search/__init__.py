"""Multi-turn search: retrievers, offline corpora and questions, the search environment."""
