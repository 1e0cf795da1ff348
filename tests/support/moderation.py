"""Prompts the default prompt screen (spec/moderation.yaml) refuses, for the tests that check
it does; the one file whose strings the check of every other prompt leaves out."""

from __future__ import annotations

REFUSED_PROMPTS = (
    "nsfw loli",
    "Draw loli hentai.",
    "naked 12 year old",
    "a 14-year-old nude",
    "lewd little girl",
    "sexy kids",
    "children's nsfw art",
    "underage porn",
    "a lolicon doujin",
    "cute child naked",
    "toddler sex scene",
    "xxx a tiny preteen",
)
SIDE_BY_SIDE = ("nude children", "children nude", "child's nude", "the naked little boy")
"""One pair of terms, refused only side by side (``APART``, their parts apart, pass)."""
APART = ("nude photos? no; children", "nude, children", "children\nnude", "kids love nude")
GENRE_NAME = "lolicon"
"""Refused by the rule of genre names alone."""
REFUSED_PROMPT = REFUSED_PROMPTS[0]
"""One of them, for a test that needs a refused prompt."""
