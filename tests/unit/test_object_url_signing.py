"""HMAC-signed object URLs: bound to one key and one expiry, refused once expired."""

from __future__ import annotations

from pathlib import Path

import pytest

from generated.errors import ObjectURLExpired, ObjectURLInvalid
from runtime.stores.url_signing import load_or_create_secret, signature, verify

SECRET = b"s" * 32
NOW = 1_800_000_000


def test_a_good_signature_before_expiry_passes() -> None:
    verify(SECRET, "img-a.jpg", str(NOW + 60), signature(SECRET, "img-a.jpg", NOW + 60), NOW)


def test_a_signature_for_another_key_is_refused() -> None:
    sig = signature(SECRET, "img-a.jpg", NOW + 60)
    with pytest.raises(ObjectURLInvalid):
        verify(SECRET, "img-b.jpg", str(NOW + 60), sig, NOW)


def test_a_moved_expiry_is_refused_as_tampered() -> None:
    sig = signature(SECRET, "img-a.jpg", NOW + 60)
    with pytest.raises(ObjectURLInvalid):
        verify(SECRET, "img-a.jpg", str(NOW + 6000), sig, NOW)


def test_another_secret_is_refused() -> None:
    sig = signature(b"t" * 32, "img-a.jpg", NOW + 60)
    with pytest.raises(ObjectURLInvalid):
        verify(SECRET, "img-a.jpg", str(NOW + 60), sig, NOW)


def test_an_expired_url_is_refused_with_how_long_ago() -> None:
    sig = signature(SECRET, "img-a.jpg", NOW - 5)
    with pytest.raises(ObjectURLExpired) as info:
        verify(SECRET, "img-a.jpg", str(NOW - 5), sig, NOW)
    assert info.value.native_status == 403
    assert "5 seconds" in info.value.message


@pytest.mark.parametrize(
    ("expires", "sig"), [(None, "x"), ("1", None), ("soon", "x"), ("1", "\u00e9\u00a9")]
)
def test_incomplete_queries_are_refused(expires: str | None, sig: str | None) -> None:
    with pytest.raises(ObjectURLInvalid):
        verify(SECRET, "img-a.jpg", expires, sig, NOW)


def test_the_kept_secret_is_created_once_and_private(tmp_path: Path) -> None:
    first = load_or_create_secret(tmp_path)
    assert load_or_create_secret(tmp_path) == first
    assert len(first) == 64
    (secret_file,) = tmp_path.iterdir()
    assert secret_file.stat().st_mode & 0o077 == 0
