"""Maintenance jobs, maintenance policies, on-demand expiry and orphan cleanup, table checks
and repairs (tag `maintenance`)."""

from __future__ import annotations

from typing import Any, Literal, Mapping

from .models import (
    GetMaintenancePolicyResponse,
    Job,
    MaintenancePolicy,
    QueueJobResponse,
    SetMaintenancePolicyResponse,
)
from .securables import Namespace, dotted, levels
from .transport import Transport

JobKind = Literal["compact", "expire-snapshots", "remove-orphan-files", "retention"]


def _table(warehouse: str, namespace: Namespace, table: str) -> dict[str, Any]:
    return {"warehouse": warehouse, "namespace": levels(namespace), "table": table}


class Jobs:
    def __init__(self, transport: Transport) -> None:
        self._t = transport

    def list(
        self,
        warehouse: str,
        namespace: Namespace | None = None,
        table: str | None = None,
        kind: JobKind | None = None,
        status: Literal["queued", "running", "succeeded", "failed"] | None = None,
        limit: int | None = None,
    ) -> list[Job]:
        """A warehouse's jobs (or a table's), newest first."""
        return self._t.call(
            "listJobs",
            params={
                "warehouse": warehouse,
                "namespace": dotted(namespace),
                "table": table,
                "kind": kind,
                "status": status,
                "limit": limit,
            },
        )["jobs"]

    def queue(
        self,
        warehouse: str,
        namespace: Namespace,
        table: str,
        kind: JobKind,
        options: Mapping[str, Any] | None = None,
        priority: int | None = None,
        wait: bool = False,
        wait_seconds: int | None = None,
    ) -> QueueJobResponse:
        """Queues a job; with `wait`, answers once it finished (or `wait_seconds` passed)."""
        body = {**_table(warehouse, namespace, table), "kind": kind, "wait": wait}
        if options:
            body["options"] = dict(options)
        if priority is not None:
            body["priority"] = priority
        if wait_seconds is not None:
            body["wait-seconds"] = wait_seconds
        return self._t.call("queueJob", body=body)

    def get(self, id: str) -> Job:
        return self._t.call("getJob", path={"id": id})


class Policies:
    """Maintenance policies of a warehouse, namespace or table."""

    def __init__(self, transport: Transport) -> None:
        self._t = transport

    def get(
        self, warehouse: str, namespace: Namespace | None = None, table: str | None = None
    ) -> GetMaintenancePolicyResponse:
        """The policy set there, and for a table the effective one."""
        return self._t.call(
            "getMaintenancePolicy",
            params={"warehouse": warehouse, "namespace": dotted(namespace), "table": table},
        )

    def set(self, on: Mapping[str, Any], policy: MaintenancePolicy | None) -> SetMaintenancePolicyResponse:
        """Sets the policy of `on` (a warehouse, namespace or table securable); None removes it."""
        return self._t.call("setMaintenancePolicy", body={"on": dict(on), "policy": policy})


class Maintenance:
    """Maintenance run at once, and table integrity."""

    def __init__(self, transport: Transport) -> None:
        self._t = transport

    def expire_snapshots(
        self,
        warehouse: str,
        namespace: Namespace,
        table: str,
        dry_run: bool = False,
        max_snapshot_age_ms: int | None = None,
        min_snapshots_to_keep: int | None = None,
    ) -> dict[str, Any]:
        body = {**_table(warehouse, namespace, table), "dry-run": dry_run}
        if max_snapshot_age_ms is not None:
            body["max-snapshot-age-ms"] = max_snapshot_age_ms
        if min_snapshots_to_keep is not None:
            body["min-snapshots-to-keep"] = min_snapshots_to_keep
        return self._t.call("expireSnapshots", body=body)

    def remove_orphan_files(
        self,
        warehouse: str,
        namespace: Namespace,
        table: str,
        dry_run: bool = True,
        older_than_ms: int | None = None,
    ) -> dict[str, Any]:
        body = {**_table(warehouse, namespace, table), "dry-run": dry_run}
        if older_than_ms is not None:
            body["older-than-ms"] = older_than_ms
        return self._t.call("removeOrphanFiles", body=body)

    def check_table(self, warehouse: str, namespace: Namespace, table: str, deep: bool = False) -> dict[str, Any]:
        return self._t.call("checkTable", body={**_table(warehouse, namespace, table), "deep": deep})

    def repair_table(
        self, warehouse: str, namespace: Namespace, table: str, dry_run: bool = True
    ) -> dict[str, Any]:
        return self._t.call("repairTable", body={**_table(warehouse, namespace, table), "dry-run": dry_run})
