"""The worker side: registration and pop, job submits, which workers fit which requests, the sweep."""
