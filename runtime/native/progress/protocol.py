"""The Redis protocol of a streamed generation (docs/design.md, "Streaming").

Every step is one Lua script, so concurrent posts, a cancel and a submit never interleave
inside a step, and no step reads Postgres: ``write_lease`` at pop, ``post_progress`` per
post, ``finish`` / ``mark_ended`` / ``mark_cancelled`` / ``cancel_request`` at the end, and
the read-backs ``posted``, ``posted_text`` and ``relayed_to_client`` for settlements and
submits. Names, lifetimes and the cap come from ``generated.streaming``. The sync client
decodes to str, so redis-py's ``T | Awaitable[T]`` answers are cast to what they are.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, cast

from redis import Redis
from redis.exceptions import NoScriptError

from generated import streaming as S
from generated.errors import (
    ProgressCapReached,
    ProgressLeaseMissing,
    ProgressOutOfOrder,
    WrongCredentials,
)


@dataclass(frozen=True)
class Ack:
    """The answer to an accepted (or already accepted) post."""

    last_seq: int
    cancelled: bool
    appended: bool


@dataclass(frozen=True)
class Lease:
    request_id: str
    owner: str
    last_seq: int
    chars: int
    cancelled: bool
    stopped: bool
    reasoning_chars: int = 0
    worker_address: str | None = None
    """Where the job was popped from (None: a lease written without it)."""


# KEYS: lease. ARGV: owner, seq, delta, delta chars, cap, maxlen, stream ttl, gen id, stream
# key prefix (the stream's name comes from the lease's request id), reasoning, reasoning
# chars. A lease written before the reasoning channel has no reasoning_chars: 0.
_POST = f"""
if redis.call('EXISTS', KEYS[1]) == 0 then return {{'missing', -1}} end
local f = redis.call('HMGET', KEYS[1], '{S.LEASE_OWNER}', '{S.LEASE_LAST_SEQ}',
                     '{S.LEASE_CHARS}', '{S.LEASE_CANCELLED}', '{S.LEASE_STOPPED}',
                     '{S.LEASE_REASONING_CHARS}')
if f[1] ~= ARGV[1] then return {{'owner', -1}} end
local last = tonumber(f[2])
local rchars = tonumber(f[6]) or 0
if f[4] == '1' then return {{'cancelled', last}} end
if f[5] == '1' then return {{'cap', last}} end
local seq = tonumber(ARGV[2])
if seq ~= last + 1 then return {{'gap', last, tonumber(f[3]), rchars}} end
local chars = tonumber(f[3]) + tonumber(ARGV[4])
rchars = rchars + tonumber(ARGV[11])
if chars + rchars > tonumber(ARGV[5]) then
  redis.call('HSET', KEYS[1], '{S.LEASE_STOPPED}', '1')
  return {{'cap', last}}
end
redis.call('HSET', KEYS[1], '{S.LEASE_LAST_SEQ}', seq, '{S.LEASE_CHARS}', chars,
           '{S.LEASE_REASONING_CHARS}', rchars)
if tonumber(ARGV[4]) > 0 or tonumber(ARGV[11]) > 0 then
  local stream = ARGV[9] .. redis.call('HGET', KEYS[1], '{S.LEASE_REQUEST_ID}')
  if tonumber(ARGV[11]) > 0 then
    redis.call('XADD', stream, 'MAXLEN', '~', ARGV[6], '*', '{S.ENTRY_KIND}', '{S.KIND_DELTA}',
               '{S.ENTRY_GENERATION_ID}', ARGV[8], '{S.ENTRY_SEQ}', seq, '{S.ENTRY_DELTA}', ARGV[3],
               '{S.ENTRY_REASONING}', ARGV[10])
  else
    redis.call('XADD', stream, 'MAXLEN', '~', ARGV[6], '*', '{S.ENTRY_KIND}', '{S.KIND_DELTA}',
               '{S.ENTRY_GENERATION_ID}', ARGV[8], '{S.ENTRY_SEQ}', seq, '{S.ENTRY_DELTA}', ARGV[3])
  end
  redis.call('EXPIRE', stream, ARGV[7])
  return {{'ok', seq}}
end
return {{'empty', seq}}
"""

# KEYS: lease. ARGV: end kind, gen id, maxlen, stream ttl, ended ttl, stream/leases prefixes.
# Appends the end entry and, for submitted/faulted, deletes the lease (and for faulted
# leaves the ended marker); for cancelled, flags the lease and keeps it until it expires.
_END = f"""
local request_id = redis.call('HGET', KEYS[1], '{S.LEASE_REQUEST_ID}')
if not request_id then return 0 end
if redis.call('HGET', KEYS[1], '{S.LEASE_CANCELLED}') == '1' then
  if ARGV[1] == '{S.KIND_CANCELLED}' then return 0 end
else
  local stream = ARGV[6] .. request_id
  redis.call('XADD', stream, 'MAXLEN', '~', ARGV[3], '*', '{S.ENTRY_KIND}', ARGV[1],
             '{S.ENTRY_GENERATION_ID}', ARGV[2])
  redis.call('EXPIRE', stream, ARGV[4])
end
if ARGV[1] == '{S.KIND_CANCELLED}' then
  redis.call('HSET', KEYS[1], '{S.LEASE_CANCELLED}', '1')
  return 1
end
redis.call('DEL', KEYS[1])
redis.call('SREM', ARGV[7] .. request_id, ARGV[2])
if ARGV[1] == '{S.KIND_FAULTED}' then
  redis.call('SET', ARGV[8], ARGV[1], 'EX', ARGV[5])
end
return 1
"""


_SHA = {script: hashlib.sha1(script.encode()).hexdigest() for script in (_POST, _END)}


def _run(redis: Redis, script: str, keys: list[str], *args: Any) -> Any:
    """EVALSHA, loading the script once per server."""
    try:
        return redis.evalsha(_SHA[script], len(keys), *keys, *args)
    except NoScriptError:
        redis.script_load(script)
        return redis.evalsha(_SHA[script], len(keys), *keys, *args)


def write_lease(
    redis: Redis,
    generation_id: str,
    request_id: str,
    worker_owner: str,
    ttl: int,
    worker_address: str = "",
) -> None:
    """The lease of a streamed generation, popped by the key whose digest is ``worker_owner``
    from ``worker_address`` ("": not known).

    It expires ``ttl`` (the generation's ttl) plus the grace after now.
    """
    lifetime = int(ttl) + S.LEASE_GRACE_SECONDS
    key = S.LEASE_KEY.of(generation_id)
    leases = S.REQUEST_LEASES_KEY.of(request_id)
    pipe = redis.pipeline(transaction=True)
    pipe.delete(key)
    pipe.hset(
        key,
        mapping={
            S.LEASE_REQUEST_ID: request_id,
            S.LEASE_OWNER: worker_owner,
            S.LEASE_LAST_SEQ: -1,
            S.LEASE_CHARS: 0,
            S.LEASE_REASONING_CHARS: 0,
            S.LEASE_CANCELLED: 0,
            S.LEASE_STOPPED: 0,
            S.LEASE_WORKER_ADDRESS: worker_address,
        },
    )
    pipe.expire(key, lifetime)
    pipe.sadd(leases, generation_id)
    pipe.expire(leases, lifetime)
    pipe.execute()


def read_lease(redis: Redis, generation_id: str) -> Lease | None:
    raw = cast(dict[str, str], redis.hgetall(S.LEASE_KEY.of(generation_id)))
    if not raw:
        return None
    return Lease(
        request_id=raw[S.LEASE_REQUEST_ID],
        owner=raw[S.LEASE_OWNER],
        last_seq=int(raw[S.LEASE_LAST_SEQ]),
        chars=int(raw[S.LEASE_CHARS]),
        cancelled=raw[S.LEASE_CANCELLED] == "1",
        stopped=raw[S.LEASE_STOPPED] == "1",
        reasoning_chars=int(raw.get(S.LEASE_REASONING_CHARS) or 0),
        worker_address=raw.get(S.LEASE_WORKER_ADDRESS) or None,
    )


def post_progress(
    redis: Redis, generation_id: str, owner: str, seq: int, delta: str, reasoning: str = ""
) -> Ack:
    """Accept post ``seq`` of a generation, or raise the error the worker gets.

    A post carries two channels, the content (``delta``) and the reasoning; each has its
    own count. Any seq but the next one is a gap (409): its metadata carries the last
    accepted seq and the content and reasoning characters accepted so far, so a worker
    whose acknowledgement was lost resends exactly the text after them with the next seq.
    Empty posts advance seq, no entry. The cap counts both channels.
    """
    outcome, last, *rest = _run(
        redis,
        _POST,
        [S.LEASE_KEY.of(generation_id)],
        owner,
        seq,
        delta,
        len(delta),
        S.GENERATION_CHARS,
        S.STREAM_MAX_ENTRIES,
        S.STREAM_SECONDS,
        generation_id,
        S.STREAM_KEY.prefix,
        reasoning,
        len(reasoning),
    )
    last = int(last)
    if outcome == "missing":
        raise ProgressLeaseMissing(id=generation_id)
    if outcome == "owner":
        raise WrongCredentials()
    if outcome == "gap":
        resync = {
            S.RESYNC_LAST_SEQ: last,
            S.RESYNC_POSTED_CHARS: int(rest[0]),
            S.RESYNC_POSTED_REASONING_CHARS: int(rest[1]),
        }
        raise ProgressOutOfOrder(seq=seq, last=last, metadata=resync)
    if outcome == "cap":
        raise ProgressCapReached(id=generation_id, limit=S.GENERATION_CHARS)
    return Ack(last_seq=last, cancelled=outcome == "cancelled", appended=outcome == "ok")


def _end(redis: Redis, generation_id: str, kind: str) -> bool:
    done = _run(
        redis,
        _END,
        [S.LEASE_KEY.of(generation_id)],
        kind,
        generation_id,
        S.STREAM_MAX_ENTRIES,
        S.STREAM_SECONDS,
        S.ENDED_MARKER_SECONDS,
        S.STREAM_KEY.prefix,
        S.REQUEST_LEASES_KEY.prefix,
        S.ENDED_KEY.of(generation_id),
    )
    return bool(done)


def finish(redis: Redis, generation_id: str) -> bool:
    """At submit: lease deleted, a submitted entry ends the generation's deltas.

    False when the generation held no lease (not streamed, expired, or cancelled before).
    """
    return _end(redis, generation_id, S.KIND_SUBMITTED)


def mark_ended(redis: Redis, generation_id: str) -> bool:
    """On a fault: the ended marker, lease deleted, a faulted entry in the stream."""
    return _end(redis, generation_id, S.KIND_FAULTED)


def mark_cancelled(redis: Redis, generation_id: str) -> bool:
    """On a cancel: later posts are acknowledged ``cancelled: true`` and appended no more.

    True the first time only, so a settlement keyed on it runs once.
    """
    return _end(redis, generation_id, S.KIND_CANCELLED)


def cancel_request(redis: Redis, request_id: str) -> list[str]:
    """Cancel every leased generation of a request; the ids newly cancelled."""
    ids = sorted(cast(set[str], redis.smembers(S.REQUEST_LEASES_KEY.of(request_id))))
    return [str(g) for g in ids if mark_cancelled(redis, str(g))]


def ended_kind(redis: Redis, generation_id: str) -> str | None:
    """The ended marker of a faulted generation (its end kind), None when there is none."""
    value = redis.get(S.ENDED_KEY.of(generation_id))
    return None if value is None else str(value)


@dataclass(frozen=True)
class Posted:
    """What a request's posts carried, per channel, in seq order."""

    content: str
    reasoning: str


def posted(redis: Redis, request_id: str, generation_id: str | None = None) -> Posted:
    """The content and reasoning posted for a request (one generation's, when given).
    For a cancel's settlement, read it after ``mark_cancelled``: nothing is appended then."""
    content: list[str] = []
    reasoning: list[str] = []
    entries = cast(list[tuple[str, dict[str, str]]], redis.xrange(S.STREAM_KEY.of(request_id)))
    for _entry_id, fields in entries:
        if fields.get(S.ENTRY_KIND) != S.KIND_DELTA:
            continue
        if generation_id is not None and fields.get(S.ENTRY_GENERATION_ID) != generation_id:
            continue
        content.append(fields.get(S.ENTRY_DELTA, ""))
        reasoning.append(fields.get(S.ENTRY_REASONING, ""))
    return Posted("".join(content), "".join(reasoning))


def posted_text(redis: Redis, request_id: str, generation_id: str | None = None) -> str:
    """The content posted for a request (one generation's, when given), in seq order."""
    return posted(redis, request_id, generation_id).content


@dataclass(frozen=True)
class Relayed:
    """What a relay of a request sent its client, and whose it was."""

    posted: Posted
    own: bool
    """All of it was the submitting generation's own posts (else an earlier worker's, whose
    relay ended when that worker died)."""


def relayed_to_client(redis: Redis, request_id: str, generation_id: str) -> Relayed | None:
    """What a relay of the request (``runtime.front.progress_stream.relay``, whose rule this
    mirrors) sent its client, read when generation ``generation_id`` submits: the text
    before the faulted end entry of another generation (a worker that died mid-stream), or
    the deltas it is still relaying (this generation's own posts); None when nothing was
    relayed, or the relay ended otherwise."""
    content: list[str] = []
    reasoning: list[str] = []
    own = True
    entries = cast(list[tuple[str, dict[str, str]]], redis.xrange(S.STREAM_KEY.of(request_id)))
    for _entry_id, fields in entries:
        kind = fields.get(S.ENTRY_KIND)
        if kind == S.KIND_DELTA:
            content.append(fields.get(S.ENTRY_DELTA, ""))
            reasoning.append(fields.get(S.ENTRY_REASONING, ""))
            own = own and fields.get(S.ENTRY_GENERATION_ID) == generation_id
        elif kind in S.END_KINDS and (kind != S.KIND_FAULTED or content):
            ended_elsewhere = fields.get(S.ENTRY_GENERATION_ID) != generation_id
            if kind == S.KIND_FAULTED and ended_elsewhere:
                return Relayed(Posted("".join(content), "".join(reasoning)), own=False)
            return None
    if not content:
        return None
    return Relayed(Posted("".join(content), "".join(reasoning)), own=own)
