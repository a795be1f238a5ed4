"""The store's errors: what a caller asked for that the database does not hold (or no longer
allows). Each is a client error (service/errors.py) carrying its HTTP status and message, so
the app's one exception handler answers for it."""

from __future__ import annotations

from service.errors import Busy, ClientError, Conflict, NotFound


class StoreError(ClientError):
    """Base of the errors the API maps to 4xx."""


class UnknownRollout(StoreError, NotFound):
    def __init__(self, rollout_id: str) -> None:
        super().__init__(f"no rollout with id {rollout_id!r}")
        self.rollout_id = rollout_id


class UnknownTrajectory(StoreError, NotFound):
    pass


class UnknownBatch(StoreError, NotFound):
    def __init__(self, batch_id: str) -> None:
        super().__init__(f"no batch with id {batch_id!r}")
        self.batch_id = batch_id


class LeaseExpired(StoreError, Conflict):
    def __init__(self, batch_id: str) -> None:
        super().__init__(
            f"lease of batch {batch_id!r} expired before this ack; its groups are offered "
            "again (dedupe by trajectory_id)"
        )
        self.batch_id = batch_id


class IdempotencyConflict(StoreError, Conflict):
    def __init__(self, key: str) -> None:
        super().__init__(
            f"Idempotency-Key {key!r} was already used for a different request; "
            "use a new key for a new request"
        )
        self.key = key


class DiskFull(StoreError, Busy):
    """New work would not fit on the data disk (503, Retry-After): refused before it starts,
    so what was admitted never meets a full disk while committing."""

    status_code = 503
