"""The native API's HTTP surface: the Flask app, body reading, errors, rate limits and views."""
