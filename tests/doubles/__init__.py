"""Test doubles: stand-ins for third-party systems, each documented as a double."""
