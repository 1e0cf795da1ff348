"""The horde's public figures: text statistics, the load, the active models."""
