"""Streamed generations on Redis: the lease and post protocol and the settlement of a cancel."""
