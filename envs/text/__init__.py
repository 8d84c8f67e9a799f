"""Multi-turn text environments for LLM tool use (see README.md in this folder)."""
