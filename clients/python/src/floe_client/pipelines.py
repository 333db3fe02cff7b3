"""Kafka-to-Iceberg pipelines (tag `pipelines`) and HTTP ingestion's state (tag `ingest`)."""

from __future__ import annotations

from typing import Any

from .models import Pipeline, PipelineSpec
from .securables import Namespace, levels
from .transport import Transport


class Pipelines:
    def __init__(self, transport: Transport) -> None:
        self._t = transport

    def list(self) -> list[Pipeline]:
        return self._t.call("listPipelines")["pipelines"]

    def create(self, spec: PipelineSpec) -> PipelineSpec:
        return self._t.call("createPipeline", body=dict(spec))

    def get(self, name: str) -> Pipeline:
        return self._t.call("getPipeline", path={"name": name})

    def delete(self, name: str) -> None:
        self._t.call("deletePipeline", path={"name": name})

    def status(self, name: str) -> dict[str, Any]:
        return self._t.call("pipelineStatus", path={"name": name})

    def redrive_dead_letters(self, name: str, dry_run: bool = True) -> dict[str, Any]:
        return self._t.call("redrivePipelineDeadLetters", path={"name": name}, body={"dry-run": dry_run})


class Ingest:
    def __init__(self, transport: Transport) -> None:
        self._t = transport

    def status(self) -> list[dict[str, Any]]:
        """Tables this node ingests into over HTTP, with log positions and counters."""
        return self._t.call("ingestStatus")["tables"]

    def replay(
        self,
        warehouse: str,
        namespace: Namespace,
        table: str,
        from_sequence: int,
        to_sequence: int,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        return self._t.call(
            "replayIngest",
            body={
                "warehouse": warehouse,
                "namespace": levels(namespace),
                "table": table,
                "from-sequence": from_sequence,
                "to-sequence": to_sequence,
                "dry-run": dry_run,
            },
        )
