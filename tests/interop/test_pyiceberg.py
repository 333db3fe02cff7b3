"""PyIceberg against Floe: the catalog operations and table changes a PyIceberg user makes,
on SQLite and PostgreSQL catalogs and on local and S3 warehouses."""

from __future__ import annotations

import threading
from datetime import date, datetime, timezone

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import BucketTransform, DayTransform, IdentityTransform, TruncateTransform
from pyiceberg.types import (
    DoubleType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestamptzType,
)

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "category", StringType(), required=False),
    NestedField(3, "ts", TimestamptzType(), required=False),
    NestedField(4, "amount", IntegerType(), required=False),
)


def rows(ids, category="a", day=1):
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "category": pa.array([category] * len(ids), pa.string()),
            "ts": pa.array(
                [datetime(2026, 1, day, 12, tzinfo=timezone.utc)] * len(ids), pa.timestamp("us", tz="UTC")
            ),
            "amount": pa.array([i * 10 for i in ids], pa.int32()),
        }
    )


def ids_of(table) -> list[int]:
    return sorted(table.scan().to_arrow()["id"].to_pylist())


def test_namespaces(floe_matrix):
    catalog = floe_matrix.pyiceberg()
    catalog.create_namespace("sales", properties={"owner": "finance"})
    catalog.create_namespace(("sales", "emea"))
    catalog.create_namespace(("sales", "apac"))
    with pytest.raises(NamespaceAlreadyExistsError):
        catalog.create_namespace("sales")
    assert ("sales",) in catalog.list_namespaces()
    assert sorted(catalog.list_namespaces("sales")) == [("sales", "apac"), ("sales", "emea")]
    assert catalog.load_namespace_properties("sales")["owner"] == "finance"
    summary = catalog.update_namespace_properties("sales", removals={"owner", "ghost"}, updates={"tier": "gold"})
    assert summary.removed == ["owner"] and summary.missing == ["ghost"] and summary.updated == ["tier"]
    with pytest.raises(NamespaceNotEmptyError):
        catalog.drop_namespace("sales")
    catalog.drop_namespace(("sales", "apac"))
    assert catalog.list_namespaces("sales") == [("sales", "emea")]


@pytest.mark.parametrize(
    "spec,column",
    [
        (PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "category")), "category"),
        (PartitionSpec(PartitionField(3, 1000, DayTransform(), "ts_day")), "ts_day"),
        (PartitionSpec(PartitionField(1, 1000, BucketTransform(4), "id_bucket")), "id_bucket"),
        (PartitionSpec(PartitionField(2, 1000, TruncateTransform(1), "category_trunc")), "category_trunc"),
    ],
    ids=["identity", "day", "bucket", "truncate"],
)
def test_partitioned_tables(floe_matrix, spec, column):
    catalog = floe_matrix.pyiceberg()
    catalog.create_namespace("p")
    table = catalog.create_table("p.t", schema=SCHEMA, partition_spec=spec)
    table.append(rows([1, 2, 3], "alpha", 1))
    table.append(rows([4, 5], "beta", 2))
    table = catalog.load_table("p.t")
    assert ids_of(table) == [1, 2, 3, 4, 5]
    assert table.spec().fields[0].name == column
    filtered = table.scan(row_filter="category == 'beta'").to_arrow()
    assert sorted(filtered["id"].to_pylist()) == [4, 5]
    partitions = table.inspect.partitions()
    assert partitions.num_rows >= 2


def test_append_overwrite_delete(floe_matrix):
    catalog = floe_matrix.pyiceberg()
    catalog.create_namespace("w")
    table = catalog.create_table("w.t", schema=SCHEMA)
    table.append(rows([1, 2, 3, 4]))
    table.delete(delete_filter="id >= 3")
    assert ids_of(catalog.load_table("w.t")) == [1, 2]
    table = catalog.load_table("w.t")
    table.overwrite(rows([10, 11]))
    table = catalog.load_table("w.t")
    assert ids_of(table) == [10, 11]
    operations = [s.summary.operation.value for s in table.snapshots()]
    assert operations[0] == "append" and "delete" in operations and "overwrite" in operations
    with pytest.raises(TableAlreadyExistsError):
        catalog.create_table("w.t", schema=SCHEMA)


def test_schema_evolution(floe_matrix):
    catalog = floe_matrix.pyiceberg()
    catalog.create_namespace("s")
    table = catalog.create_table("s.t", schema=SCHEMA)
    table.append(rows([1, 2]))
    with table.update_schema() as update:
        update.add_column("note", StringType())
        update.rename_column("category", "kind")
        update.update_column("amount", field_type=LongType())
        update.delete_column("ts")
    table = catalog.load_table("s.t")
    fields = {f.name: f for f in table.schema().fields}
    assert set(fields) == {"id", "kind", "amount", "note"}
    assert isinstance(fields["amount"].field_type, LongType)
    table.append(
        pa.table(
            {
                "id": pa.array([3], pa.int64()),
                "kind": pa.array(["z"]),
                "amount": pa.array([30], pa.int64()),
                "note": pa.array(["new"]),
            }
        )
    )
    data = catalog.load_table("s.t").scan().to_arrow().sort_by("id")
    assert data["kind"].to_pylist() == ["a", "a", "z"]
    assert data["amount"].to_pylist() == [10, 20, 30]
    assert data["note"].to_pylist() == [None, None, "new"]
    assert len(catalog.load_table("s.t").schemas()) == 2


def test_partition_evolution(floe_matrix):
    catalog = floe_matrix.pyiceberg()
    catalog.create_namespace("e")
    table = catalog.create_table("e.t", schema=SCHEMA)
    table.append(rows([1, 2], day=1))
    with table.update_spec() as update:
        update.add_field("ts", DayTransform(), "ts_day")
    table = catalog.load_table("e.t")
    table.append(rows([3], day=5))
    table = catalog.load_table("e.t")
    assert [f.name for f in table.spec().fields] == ["ts_day"]
    assert len(table.specs()) == 2
    assert ids_of(table) == [1, 2, 3]
    recent = table.scan(row_filter="ts >= '2026-01-04T00:00:00+00:00'").to_arrow()
    assert recent["id"].to_pylist() == [3]


def test_time_travel(floe_matrix):
    catalog = floe_matrix.pyiceberg()
    catalog.create_namespace("tt")
    table = catalog.create_table("tt.t", schema=SCHEMA)
    table.append(rows([1]))
    first = catalog.load_table("tt.t").current_snapshot().snapshot_id
    table = catalog.load_table("tt.t")
    table.append(rows([2]))
    table = catalog.load_table("tt.t")
    table.manage_snapshots().create_tag(first, "v1").commit()
    table = catalog.load_table("tt.t")
    assert sorted(table.scan(snapshot_id=first).to_arrow()["id"].to_pylist()) == [1]
    assert sorted(table.scan().use_ref("v1").to_arrow()["id"].to_pylist()) == [1]
    assert ids_of(table) == [1, 2]
    assert set(table.refs()) == {"main", "v1"}


def test_rename_and_drop_with_purge(floe_matrix):
    catalog = floe_matrix.pyiceberg()
    catalog.create_namespace("r")
    catalog.create_namespace("r2")
    table = catalog.create_table("r.t", schema=SCHEMA)
    table.append(rows([1, 2]))
    catalog.rename_table("r.t", "r2.moved")
    with pytest.raises(NoSuchTableError):
        catalog.load_table("r.t")
    moved = catalog.load_table("r2.moved")
    assert ids_of(moved) == [1, 2]
    data_files = [task.file.file_path for task in moved.scan().plan_files()]
    assert data_files
    catalog.purge_table("r2.moved")
    assert not catalog.table_exists("r2.moved")
    io = moved.io
    for path in data_files + [moved.metadata_location]:
        assert not io.new_input(path).exists(), f"{path} should be purged"
    assert catalog.list_tables("r2") == []


def test_drop_without_purge_keeps_files(floe):
    catalog = floe.pyiceberg()
    catalog.create_namespace("k")
    table = catalog.create_table("k.t", schema=SCHEMA)
    table.append(rows([1]))
    table = catalog.load_table("k.t")
    catalog.drop_table("k.t")
    assert table.io.new_input(table.metadata_location).exists()
    registered = catalog.register_table("k.back", table.metadata_location)
    assert ids_of(registered) == [1]


def test_purge_refused_when_gc_is_disabled(floe):
    catalog = floe.pyiceberg()
    catalog.create_namespace("g")
    table = catalog.create_table("g.shared", schema=SCHEMA, properties={"gc.enabled": "false"})
    table.append(rows([1]))
    table = catalog.load_table("g.shared")
    data_files = [task.file.file_path for task in table.scan().plan_files()]
    with pytest.raises(Exception, match="gc.enabled is false"):
        catalog.purge_table("g.shared")
    assert catalog.table_exists("g.shared"), "a refused purge drops nothing"
    assert all(table.io.new_input(path).exists() for path in data_files)
    catalog.drop_table("g.shared")
    assert all(table.io.new_input(path).exists() for path in data_files)


def test_views(floe_matrix):
    from pyiceberg.view.metadata import SQLViewRepresentation, ViewVersion

    catalog = floe_matrix.pyiceberg()
    catalog.create_namespace("v")
    catalog.create_table("v.base", schema=SCHEMA)
    view_schema = Schema(NestedField(1, "id", LongType(), required=False))
    version = ViewVersion(
        version_id=1,
        schema_id=0,
        representations=[SQLViewRepresentation(type="sql", sql="SELECT id FROM v.base", dialect="spark")],
        default_namespace=["v"],
    )
    catalog.create_view("v.ids", view_schema, version)
    assert catalog.view_exists("v.ids")
    assert catalog.list_views("v") == [("v", "ids")]
    assert catalog.list_tables("v") == [("v", "base")]
    loaded = catalog.load_view("v.ids")
    assert loaded.metadata.versions[0].representations[0].root.sql == "SELECT id FROM v.base"
    catalog.drop_view("v.ids")
    assert not catalog.view_exists("v.ids")


def test_concurrent_appends_keep_every_row(floe_matrix):
    catalog = floe_matrix.pyiceberg()
    catalog.create_namespace("c")
    catalog.create_table("c.t", schema=SCHEMA)
    writers, batches = 6, 4
    conflicts = []

    def writer(w: int) -> None:
        own = floe_matrix.pyiceberg()
        for b in range(batches):
            ids = [w * 1000 + b * 10 + i for i in range(3)]
            while True:
                table = own.load_table("c.t")
                try:
                    table.append(rows(ids))
                    break
                except CommitFailedException:
                    conflicts.append(w)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    table = catalog.load_table("c.t")
    ids = table.scan().to_arrow()["id"].to_pylist()
    expected = sorted(w * 1000 + b * 10 + i for w in range(writers) for b in range(batches) for i in range(3))
    assert sorted(ids) == expected, "every committed append is in the table exactly once"
    assert len(table.snapshots()) == writers * batches


def test_tags_and_branches_of_format_version_1_tables_are_kept(floe):
    """The spec allows refs in v1 metadata; iceberg-rust's v1 form drops them, Floe keeps them."""
    import json
    from urllib.parse import urlparse

    catalog = floe.pyiceberg()
    catalog.create_namespace("v1")
    table = catalog.create_table("v1.tagged", schema=SCHEMA, properties={"format-version": "1"})
    assert table.metadata.format_version == 1
    table.append(rows([1, 2]))
    first = table.current_snapshot().snapshot_id
    table.append(rows([3]))
    table.manage_snapshots().create_tag(first, "release").create_branch(first, "audit").commit()

    again = floe.pyiceberg().load_table("v1.tagged")
    assert again.metadata.format_version == 1
    assert again.metadata.refs["release"].snapshot_id == first
    assert again.metadata.refs["release"].snapshot_ref_type == "tag"
    assert again.metadata.refs["audit"].snapshot_ref_type == "branch"
    assert sorted(again.scan(snapshot_id=again.metadata.refs["release"].snapshot_id).to_arrow()["id"].to_pylist()) == [1, 2]
    # The file Floe wrote holds them, for every other reader.
    written = json.loads(open(urlparse(again.metadata_location).path).read())
    assert written["format-version"] == 1
    assert written["refs"]["release"] == {"snapshot-id": first, "type": "tag"}
    # A later commit keeps them, and Floe's SQL sees them.
    again.append(rows([4]))
    assert floe.pyiceberg().load_table("v1.tagged").metadata.refs["release"].snapshot_id == first
    answer = floe.api("POST", "/api/v1/sql", json={"sql": "SELECT name, type FROM v1.\"tagged$refs\" ORDER BY name", "warehouse": floe.warehouse})
    assert answer.status_code == 200, answer.text
    assert answer.json()["rows"] == [{"name": "audit", "type": "BRANCH"}, {"name": "main", "type": "BRANCH"}, {"name": "release", "type": "TAG"}]
