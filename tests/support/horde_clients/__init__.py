"""Drivers for the horde's own clients, each run in the client's own environment (``make
install`` builds them under .venv/clients) by tests/integration/test_horde_clients.py."""
