"""A chat request's stored objects over its life: taken in at submit, sent at pop, deleted at
its end (docs/design.md, "Images").

``take_in`` runs image intake before the transaction, and ``ChatObjects`` remembers every
object stored so the caller deletes what the committed row does not own (refusal, dry run,
replay); ``dispatch_messages`` picks the transport at pop, after the row lock is gone;
``release_ended`` deletes the objects of ended requests (the sweep, an expired one's).
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.orm import Session, sessionmaker

from generated.chat.names import DECL_IMAGE_TRANSPORTS, PARAM_MESSAGES
from generated.storage import TRANSPORT_MESSAGES_URL
from runtime.config import Settings
from runtime.contract.messages import messages_for_worker
from runtime.native.db.tables import OWNS_OBJECTS, WaitingPrompt
from runtime.native.objects.fetch import FetchPolicy
from runtime.native.objects.intake import IntakePolicy, IntakeResult, reference, take_in_images
from runtime.native.objects.offload import messages_url, offload_if_large, serialised
from runtime.native.objects.transport import data_url, for_transports, referenced_keys
from runtime.stores.database import transaction
from runtime.stores.objects import ObjectStore

log = logging.getLogger(__name__)


def intake_policy(settings: Settings) -> IntakePolicy:
    return IntakePolicy(fetch=FetchPolicy(allow_loopback=settings.image_fetch_allow_loopback))


@dataclass
class ChatObjects:
    """One submit's objects: the images taken in, and any offloaded messages."""

    store: ObjectStore
    intake: IntakeResult
    offload_threshold: int
    stored: list[str] = field(default_factory=list)
    """Every key this submit stored (a retried transaction may store a second offload)."""

    def __post_init__(self) -> None:
        self.stored.extend(image.key for image in self.intake.images)

    @property
    def image_keys(self) -> list[str]:
        return [image.key for image in self.intake.images]

    def limit_measures(self) -> dict[str, int]:
        return self.intake.limit_measures()

    def inlined_size(self, messages: list[dict[str, Any]]) -> int:
        """The JSON size of ``messages`` with every reference replaced by its data URL,
        computed from the stored sizes (no read of the store)."""
        sizes = {image.key: image.size for image in self.intake.images}
        total = len(serialised(messages))
        header = len(data_url(b""))
        for key in referenced_keys(messages):
            total += header + 4 * math.ceil(sizes.get(key, 0) / 3) - len(reference(key))
        return total

    def offload(self, kept: list[dict[str, Any]]) -> str | None:
        """Store the kept messages, as a worker receives them and images inlined, when they
        are above the threshold; the object key, or None."""
        worker_messages = messages_for_worker(kept)
        if self.inlined_size(worker_messages) <= self.offload_threshold:
            return None
        key = offload_if_large(worker_messages, self.store, self.offload_threshold)
        if key is not None:
            self.stored.append(key)
        return key

    def discard_unowned(self, owned: Iterable[str]) -> None:
        """Delete what this submit stored that no committed row owns."""
        keep = set(owned)
        delete_objects(self.store, [key for key in self.stored if key not in keep])


def take_in(
    request: dict[str, Any],
    store: ObjectStore,
    settings: Settings,
    offload_threshold: int,
    *,
    source: str,
) -> tuple[dict[str, Any], ChatObjects]:
    """The request with its image URLs replaced by references, and its objects, its images
    fetched within ``source``'s share of the fetch pool; raises ImageValidationFailed
    (nothing left stored) on a bad image."""
    intake = take_in_images(request[PARAM_MESSAGES], store, intake_policy(settings), source=source)
    stored_request = {**request, PARAM_MESSAGES: intake.messages}
    return stored_request, ChatObjects(store, intake, offload_threshold)


def delete_objects(store: ObjectStore, keys: Iterable[str]) -> None:
    """Delete each object; a failure is logged, never raised (the request already ended)."""
    for key in keys:
        try:
            store.delete(key)
        except Exception:
            log.exception("could not delete object %s", key)


def _owns_objects() -> Any:
    return text(OWNS_OBJECTS)  # the condition of the partial index ix_waiting_prompts_objects


def release_ended(
    sessions: sessionmaker[Session], store: ObjectStore | None, wp_ids: Iterable[uuid.UUID]
) -> int:
    """Delete the objects of those requests that have ended; returns how many were deleted.

    Rows are locked while their objects go, and their keys are cleared in the same commit,
    so two releases never race and a failed commit leaves the keys for the sweep to retry.
    """
    ids = list(wp_ids)
    if store is None or not ids:
        return 0
    deleted = 0
    with transaction(sessions) as session:
        rows = session.scalars(
            select(WaitingPrompt)
            .where(
                WaitingPrompt.id.in_(ids),
                ~WaitingPrompt.active,
                _owns_objects(),
            )
            .with_for_update(skip_locked=True)
        ).all()
        for wp in rows:
            delete_objects(store, wp.object_keys)
            deleted += len(wp.object_keys)
            wp.object_keys = []
    return deleted


def ended_with_objects(session: Session, limit: int = 500) -> list[uuid.UUID]:
    """Ended requests still owning objects (what the sweep releases)."""
    return list(
        session.scalars(
            select(WaitingPrompt.id).where(~WaitingPrompt.active, _owns_objects()).limit(limit)
        )
    )


def dispatch_messages(
    payload: dict[str, Any],
    messages_object: str | None,
    store: ObjectStore,
    declaration: dict[str, Any],
) -> dict[str, Any]:
    """The job payload by the flowchart: messages_url when the request was offloaded and the
    worker declares it; otherwise messages inline, images by the worker's transport."""
    transports = list(declaration.get(DECL_IMAGE_TRANSPORTS) or [])
    out = dict(payload)
    if messages_object is not None and TRANSPORT_MESSAGES_URL in transports:
        del out[PARAM_MESSAGES]
        out[TRANSPORT_MESSAGES_URL] = messages_url(store, messages_object)
        return out
    out[PARAM_MESSAGES] = for_transports(payload[PARAM_MESSAGES], store, transports)
    return out
