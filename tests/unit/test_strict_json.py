"""runtime.strict_json.parse: each malformed body is one Malformed kind with its path, at any
depth, and lifting image data URLs out of the parse never changes the result."""

from __future__ import annotations

import pytest

from runtime import strict_json
from runtime.body_caps import DATA_IMAGE, inline_image_bound

MALFORMED = {
    b"[" * 10_000 + b"]" * 10_000: ("depth", "body"),
    b'{"a":' * 900 + b"1" + b"}" * 900: ("depth", "a." * 63 + "a"),
    b"[" * 65 + b"]" * 65: ("depth", "[0]." * 63 + "[0]"),
    b'{"params":{"temperature":1e400}}': ("non_finite", "params.temperature"),
    b'{"x":[1,-1e999]}': ("non_finite", "x.[1]"),
    b'{"x":NaN}': ("syntax", "body"),
    b'{"x":-Infinity}': ("syntax", "body"),
    b'{"m":["ok","\\ud800"]}': ("surrogate", "m.[1]"),
    b'{"m":{"\\udc00":1}}': ("surrogate", "m.\\udc00"),
    b'{"m":"a\\u0000b"}': ("nul", "m"),
    b'{"m":{"k\\u0000":1}}': ("nul", "m.k\\u0000"),
    b'{"m":"\xff"}': ("syntax", "body"),
    b'{"m":': ("syntax", "body"),
}


@pytest.mark.parametrize("raw", list(MALFORMED), ids=[str(i) for i in range(len(MALFORMED))])
def test_each_malformed_body_is_one_kind_with_its_path(raw: bytes) -> None:
    for lift in (b"", DATA_IMAGE):
        with pytest.raises(strict_json.Malformed) as caught:
            strict_json.parse(raw, max_depth=64, lift=lift)
        assert (caught.value.kind, caught.value.path) == MALFORMED[raw]
        str(caught.value).encode()  # a message any response or log line can carry


def test_the_depth_bound_is_exact() -> None:
    assert strict_json.parse(b"[" * 64 + b"]" * 64, max_depth=64) is not None
    assert strict_json.parse(b"[" * 63 + b"[1]" + b"]" * 63, max_depth=64) is not None
    with pytest.raises(strict_json.Malformed):
        strict_json.parse(b"[" * 64 + b"[1]" + b"]" * 64, max_depth=64)


URL = b'"data:image/png;base64,AAAA"'
LIFTED = [
    b'{"a":' + URL + b',"b":[' + URL + b",{" + URL + b":1}]}",  # as a key: parsed whole
    b'{"a":"x\\' + URL[:-1] + b'\\"y"}',  # inside another string
    b'{"a":"data:image/png;base64,A\\/B"}',  # an escape: not lifted
    b'{"a":' + URL + b',"n":"\\u0000"}',  # an escaped NUL anywhere: parsed whole
    b'{"a":"x"' + URL + b"}",  # after a closing quote: invalid either way
    b'{"a":"\\\\"' + URL[1:] + b"}",  # after an escaped backslash: a closing quote
    b'{"a":"data:image/\xc3\xa9"}',  # not ASCII: parsed whole
    b"[" + URL + b",1e400]",
    URL,
    b"[[[" + URL + b"]]]",
    b'{"a":"\\ud83d\\ude00",' + b'"b":' + URL + b"}",
]


@pytest.mark.parametrize("raw", LIFTED, ids=[str(i) for i in range(len(LIFTED))])
def test_lifting_data_urls_gives_the_same_result(raw: bytes) -> None:
    outcomes = []
    for lift in (b"", DATA_IMAGE):
        try:
            outcomes.append(repr(strict_json.parse(raw, max_depth=64, lift=lift)))
        except strict_json.Malformed as bad:
            outcomes.append(f"{bad.kind} {bad.path}")
    assert outcomes[0] == outcomes[1]


def test_the_inline_image_bound_counts_each_data_url_string() -> None:
    raw = b'{"a":' + URL + b',"t":"data:image","b":[' + URL + b"]}"
    assert inline_image_bound(raw) == 2 * len(URL) + len(b'"data:image"')
    assert inline_image_bound(b'{"a":"text"}') == 0


def test_the_older_helpers_walk_any_depth() -> None:
    deep: object = 1.5
    for _ in range(5000):
        deep = [deep]
    assert strict_json.non_finite(deep) is None
    assert not strict_json.has_nul(deep)
    assert strict_json.non_finite({"x": [1, float("inf")]}) == "x.[1]"
