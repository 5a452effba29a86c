"""Optional integrations with other training engines (each imports its engine lazily)."""
