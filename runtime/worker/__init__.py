"""The chat worker and the pieces it stands on (demo model, llama.cpp server)."""
