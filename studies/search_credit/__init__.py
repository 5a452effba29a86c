"""The search credit study (README.md beside this file)."""
