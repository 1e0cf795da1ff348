"""A chat request's objects: image intake and fetch, transports at pop, message offload, release."""
