"""Migration records and helpers, and in-place conversion of Hive-layout Parquet (tag
`migration`)."""

from __future__ import annotations

from typing import Any, Mapping

from .models import DigestMigratedTableResponse
from .securables import Namespace, levels
from .transport import Transport


class Migrations:
    def __init__(self, transport: Transport) -> None:
        self._t = transport

    def list(self) -> dict[str, Any]:
        return self._t.call("listMigrations")

    def get(self, name: str) -> dict[str, Any]:
        """A migration's table records."""
        return self._t.call("getMigration", path={"name": name})

    def forget(self, name: str) -> dict[str, Any]:
        return self._t.call("forgetMigration", path={"name": name})

    def put_table(self, name: str, source: str, wave: int, state: Mapping[str, Any]) -> None:
        """Records one source table's step in migration `name`."""
        self._t.call(
            "putMigrationTable",
            path={"name": name},
            body={"source": source, "wave": wave, "state": dict(state)},
        )

    def read_metadata(
        self,
        warehouse: str,
        metadata_location: str,
        namespace: Namespace | None = None,
        table: str | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"warehouse": warehouse, "metadata-location": metadata_location}
        if namespace is not None:
            body["namespace"] = levels(namespace)
        if table is not None:
            body["table"] = table
        return self._t.call("readMigrationMetadata", body=body)

    def digest(
        self, warehouse: str, namespace: Namespace, table: str, source: Mapping[str, Any]
    ) -> DigestMigratedTableResponse:
        """Reads a migrated table on both sides and digests it."""
        return self._t.call(
            "digestMigratedTable",
            body={"warehouse": warehouse, "namespace": levels(namespace), "table": table, "source": dict(source)},
        )

    def convert_table(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Converts Hive-layout Parquet files into an Iceberg table in place (a
        `ConvertTableRequest`)."""
        return self._t.call("convertTable", body=dict(request))
