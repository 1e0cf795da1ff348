"""The worker side: registration and pop, job submits, which workers fit which requests, sweep."""
