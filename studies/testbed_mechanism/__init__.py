"""The testbed mechanism study (README.md beside this file)."""
