"""The LLM off-policy study (README.md beside this file)."""
