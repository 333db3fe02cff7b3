"""Warehouses, their soft-delete settings and dropped tables, and deletion protection
(tag `management`)."""

from __future__ import annotations

from typing import Iterator, Mapping

from .models import (
    DeletionProtection,
    DroppedTabular,
    ListDroppedResponse,
    PurgeDroppedResponse,
    Securable,
    SoftDeleteSetting,
    StorageProfile,
    StorageValidation,
    Warehouse,
)
from .securables import Namespace, dotted
from .transport import Transport


class Warehouses:
    def __init__(self, transport: Transport) -> None:
        self._t = transport

    def list(self) -> list[Warehouse]:
        return self._t.call("listWarehouses")["warehouses"]

    def create(
        self,
        name: str,
        storage: StorageProfile,
        properties: Mapping[str, str] | None = None,
        create_bucket: bool = False,
    ) -> Warehouse:
        """A warehouse on `storage`, e.g. `{"type": "local", "path": "/data/wh"}` or
        `{"type": "s3", "bucket": …, "endpoint": …}`. The storage is validated first (the
        answer's `validation`); with `create_bucket` the S3 bucket is created and given
        lifecycle rules before."""
        body: dict = {"name": name, "storage": storage}
        if properties:
            body["properties"] = dict(properties)
        if create_bucket:
            body["create-bucket"] = True
        return self._t.call("createWarehouse", body=body)

    def validate(self, name: str) -> StorageValidation:
        """Validates a warehouse's storage; the report's `ok` says whether every step passed."""
        return self._t.call("validateWarehouse", path={"name": name})

    def validate_storage(self, storage: StorageProfile) -> StorageValidation:
        """Validates storage a warehouse could be created on, creating nothing."""
        return self._t.call("validateStorage", body={"storage": storage})

    def get(self, name: str) -> Warehouse:
        return self._t.call("getWarehouse", path={"name": name})

    def delete(self, name: str) -> None:
        self._t.call("deleteWarehouse", path={"name": name})

    def soft_delete(self, name: str) -> SoftDeleteSetting:
        return self._t.call("getSoftDelete", path={"name": name})

    def set_soft_delete(self, name: str, retention_seconds: int) -> SoftDeleteSetting:
        """Keeps dropped tables and views for `retention_seconds` (0: drop at once)."""
        return self._t.call(
            "setSoftDelete", path={"name": name}, body={"retention-seconds": retention_seconds}
        )

    def dropped(
        self,
        name: str,
        namespace: Namespace | None = None,
        after: str | None = None,
        limit: int | None = None,
    ) -> ListDroppedResponse:
        """One page of dropped tables and views kept by soft delete."""
        return self._t.call(
            "listDropped",
            path={"name": name},
            params={"namespace": dotted(namespace), "after": after, "limit": limit},
        )

    def all_dropped(self, name: str, namespace: Namespace | None = None) -> Iterator[DroppedTabular]:
        after = None
        while True:
            page = self.dropped(name, namespace, after)
            yield from page["dropped"]
            after = page.get("next-after")
            if after is None:
                return

    def undrop(self, name: str, id: str) -> DroppedTabular:
        return self._t.call("undrop", path={"name": name, "id": id})["undropped"]

    def purge_dropped(self, name: str, id: str) -> PurgeDroppedResponse:
        return self._t.call("purgeDropped", path={"name": name, "id": id})


class Protection:
    """Deletion protection of a warehouse, namespace, table or view."""

    def __init__(self, transport: Transport) -> None:
        self._t = transport

    def get(
        self,
        warehouse: str,
        namespace: Namespace | None = None,
        table: str | None = None,
        view: str | None = None,
    ) -> DeletionProtection:
        return self._t.call(
            "getDeletionProtection",
            params={"warehouse": warehouse, "namespace": dotted(namespace), "table": table, "view": view},
        )

    def set(self, on: Securable, protected: bool = True) -> DeletionProtection:
        return self._t.call("setDeletionProtection", body={"on": on, "protected": protected})
