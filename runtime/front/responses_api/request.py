"""A Responses request as the chat request a chat completion makes (spec/responses/).

``translate`` checks each key against its schema and treatment (unknown keys, refused keys
and values off their schema are refused naming the key) and builds the chat body: a chat
parameter, an engine rule's output (``TRANSLATIONS``) or its own keys. Its ``Translation``
holds the chat body, what the Response repeats (``echo``) and each message's input item, so
``named`` can name a chat refusal as the client wrote it (``input.[1].content``).
``checked_and_encoded`` is the route's check of its body for ``admitted_body``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from generated.chat.names import (
    CONTEXT_FIT_REFUSE,
    CONTEXT_FIT_TRUNCATE_OLDEST,
    HORDE_CONTEXT_FIT,
    PARAM_HORDE,
    PARAM_MESSAGES,
    PARAM_RESPONSE_FORMAT,
    PARAM_TOOL_CHOICE,
    PARAM_TOOLS,
    RESPONSE_FORMAT_JSON_SCHEMA,
    ROLE_SYSTEM,
)
from generated.errors import HordeError, InvalidChatParameter
from generated.responses.names import (
    RESPONSES_PARAM_INPUT,
    RESPONSES_PARAM_TEXT,
    RESPONSES_PARAM_TOOL_CHOICE,
    RESPONSES_PARAM_TOOLS,
    RESPONSES_PARAM_TRUNCATION,
    TOOL_TYPE_FUNCTION,
)
from generated.responses.tables import (
    CHAT_TO_RESPONSES,
    REFUSED_TOOL_CHOICES,
    REFUSED_TOOLS,
    RESPONSES_ECHO,
    RESPONSES_PARAMETERS,
    TEXT_FORMATS,
    TOOL_CHOICE_FUNCTION,
    TOOL_FUNCTION,
    TOOL_HISTORY_REFUSALS,
)
from runtime.contract.checks import check, join_param, kind_of
from runtime.contract.registry import implements
from runtime.contract.validator import kept, unknown_key
from runtime.front.admission import checked_chat_body, encoded, parsed_body
from runtime.front.responses_api.items import Origin, input_messages, shaped

FORMAT = "format"
"""The key of ``text`` that becomes the chat response_format."""


@dataclass
class Translation:
    """A Responses request on its way to the chat request."""

    chat: dict[str, Any] = field(default_factory=dict)
    echo: dict[str, Any] = field(default_factory=dict)
    instructions: list[dict[str, Any]] = field(default_factory=list)
    conversation: list[dict[str, Any]] = field(default_factory=list)
    origins: list[Origin] = field(default_factory=list)
    """Per chat message (instructions first), the item it came from."""
    truncate: bool = False

    def named(self, error: HordeError) -> HordeError:
        """``error`` with the field it names (param, and the message's mention of it) as the
        Responses request names it; a refusal of the tool history in the Responses API's
        words."""
        old = error.param
        if old is None:
            return error
        new = self._responses_param(old)
        wording = TOOL_HISTORY_REFUSALS.get(error.code)
        if wording is not None:
            message = self._message_at(old) or {}
            error.message = wording.format(call_id=message.get("tool_call_id"), **error.fields)
        else:
            error.message = error.message.replace(f"'{old}'", f"'{new}'")
            if "." in old:  # a path (never a bare word of the message's own)
                error.message = error.message.replace(old, new)
        error.param = new
        error.args = (error.message,)
        return error

    def _message_at(self, param: str) -> dict[str, Any] | None:
        """The chat message ``messages.[i]...`` names."""
        match = _MESSAGE.match(param)
        messages = self.chat.get(PARAM_MESSAGES) or []
        return (
            messages[int(match.group(1))] if match and int(match.group(1)) < len(messages) else None
        )

    def _responses_param(self, param: str) -> str:
        head, _, rest = param.partition(".")
        if head == PARAM_MESSAGES:
            match = _MESSAGE.match(param)
            if match is None or int(match.group(1)) >= len(self.origins):
                return RESPONSES_PARAM_INPUT
            return self.origins[int(match.group(1))].name(match.group(2))
        for pattern, replacement in _RENAMED:
            if pattern.match(param):
                return pattern.sub(replacement, param, count=1)
        if head in CHAT_TO_RESPONSES:
            return join_param(CHAT_TO_RESPONSES[head], *([rest] if rest else []))
        return param


_MESSAGE = re.compile(rf"^{PARAM_MESSAGES}\.\[(\d+)\]\.?(.*)$")
# Chat paths a translation rule wrote -> the Responses path they came from.
_RENAMED = [
    (re.compile(r"^response_format(\.json_schema)?"), f"{RESPONSES_PARAM_TEXT}.{FORMAT}"),
    (re.compile(r"^tools\.(\[\d+\])\.function"), r"tools.\1"),
    (re.compile(r"^tool_choice\.function"), RESPONSES_PARAM_TOOL_CHOICE),
]


def _input(value: Any, where: str, t: Translation) -> None:
    t.conversation = input_messages(value, where, t.origins)


def _instructions(value: Any, where: str, t: Translation) -> None:
    t.instructions = [{"role": ROLE_SYSTEM, "content": value}]
    t.origins.insert(0, Origin(where, keys={}))  # before the input's, as its message


def _tools(value: Any, where: str, t: Translation) -> None:
    chat, echo = [], []
    for i, tool in enumerate(value):
        at = join_param(where, i)
        kind = kind_of(tool, at, [TOOL_TYPE_FUNCTION], REFUSED_TOOLS)
        fields = shaped(tool, TOOL_FUNCTION, at)
        function = {key: v for key, v in fields.items() if v is not None}
        chat.append({"type": kind, "function": function})
        echo.append({"type": kind, **{key: fields.get(key) for key in TOOL_FUNCTION["keys"]}})
    t.chat[PARAM_TOOLS] = chat
    t.echo[RESPONSES_PARAM_TOOLS] = echo


def _tool_choice(value: Any, where: str, t: Translation) -> None:
    if isinstance(value, str):
        t.chat[PARAM_TOOL_CHOICE] = value
        return
    kind = kind_of(value, where, [TOOL_TYPE_FUNCTION], REFUSED_TOOL_CHOICES)
    name = shaped(value, TOOL_CHOICE_FUNCTION, where)["name"]
    t.chat[PARAM_TOOL_CHOICE] = {"type": kind, "function": {"name": name}}
    t.echo[RESPONSES_PARAM_TOOL_CHOICE] = {"type": kind, "name": name}


def _text_format(value: Any, where: str, t: Translation) -> None:
    kind = kind_of(value, where, TEXT_FORMATS, {})
    shape = TEXT_FORMATS[kind]
    closed = {"type": "object", "additionalProperties": False}
    check(value, {**closed, "properties": {"type": {}, **shape["keys"]}}, where)
    fields = {k: v for k, v in shaped(value, shape, where).items() if v is not None}
    fmt: dict[str, Any] = {"type": kind}
    if kind == RESPONSE_FORMAT_JSON_SCHEMA:
        fmt[kind] = fields
    t.chat[PARAM_RESPONSE_FORMAT] = fmt


def _truncation(_value: Any, _where: str, t: Translation) -> None:
    t.truncate = True  # auto: the one value besides the default


def _no_effect(_value: Any, _where: str, _t: Translation) -> None:
    """A key the horde accepts and that changes nothing it does."""


# A key's translation (spec/responses/parameters.yaml) -> the rule that writes the chat body.
TRANSLATIONS: dict[str, Callable[[Any, str, Translation], None]] = {
    "input": _input,
    "instructions": _instructions,
    "tools": _tools,
    "tool_choice": _tool_choice,
    "text_format": _text_format,
    "truncation": _truncation,
    "no_effect": _no_effect,
}
implements("responses_translations", TRANSLATIONS)


def _keys(body: Mapping[str, Any], table: Mapping[str, Any], prefix: str, t: Translation) -> None:
    for key, value in body.items():
        where = f"{prefix}{key}"
        entry = table.get(key)
        if entry is None:
            raise unknown_key(where)
        if not kept(where, value, entry):
            continue
        if entry["chat"] is not None:
            t.chat[entry["chat"]] = value
        elif entry["translation"] is not None:
            TRANSLATIONS[entry["translation"]](value, where, t)
        else:
            _keys(value, entry["keys"], f"{where}.", t)


def _truncated(t: Translation) -> None:
    """truncation auto: horde.context_fit truncate_oldest, unless it says refuse."""
    horde = dict(t.chat.get(PARAM_HORDE) or {})
    if horde.get(HORDE_CONTEXT_FIT) == CONTEXT_FIT_REFUSE:
        where = f"{PARAM_HORDE}.{HORDE_CONTEXT_FIT}"
        raise InvalidChatParameter(
            detail=f"'{RESPONSES_PARAM_TRUNCATION}' auto contradicts '{where}' refuse.",
            param=RESPONSES_PARAM_TRUNCATION,
        )
    horde[HORDE_CONTEXT_FIT] = CONTEXT_FIT_TRUNCATE_OLDEST
    t.chat[PARAM_HORDE] = horde


def _echo(body: Mapping[str, Any], t: Translation) -> None:
    """What the Response object repeats: a rule's form of the key, else the client's value
    (an object over the absent one's keys), else the absent one."""
    for key, absent in RESPONSES_ECHO.items():
        if key in t.echo:
            continue
        value = body.get(key)
        if value is None:
            value = absent
        elif isinstance(absent, dict) and isinstance(value, dict):
            value = {**absent, **value}
        t.echo[key] = value


def translate(body: object) -> Translation:
    """The chat request of a parsed Responses body, or the refusal naming its key."""
    if not isinstance(body, dict):
        raise InvalidChatParameter(detail="The request body must be a JSON object.", param=None)
    t = Translation()
    _keys(body, RESPONSES_PARAMETERS, "", t)
    messages = t.instructions + t.conversation
    if messages:
        t.chat[PARAM_MESSAGES] = messages
    if t.truncate:
        _truncated(t)
    _echo(body, t)
    return t


def checked_and_encoded(raw: bytes) -> tuple[bytes, dict[str, Any], dict[str, Any]]:
    """(the chat body to forward, encoded; the normalised chat request; the echo) of a raw
    Responses body, or the refusal: the translation's, or the chat contract's with the field
    named as the client wrote it."""
    translation = translate(parsed_body(raw))
    try:
        forward, request = checked_chat_body(translation.chat)
    except HordeError as refusal:
        raise translation.named(refusal) from None
    return encoded(forward), request, translation.echo
