"""Requests as a requester makes them: text and chat admission, status, cancel, moderation."""
