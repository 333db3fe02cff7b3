//! `floe bench migrate`: a generated 1,000-table Iceberg JDBC catalog (SQLite, PyIceberg's and
//! Java's `iceberg_tables` schema) moved onto a running server with `floe migrate`'s engine:
//! the dry run's time, tables per minute and metadata MiB/s of the run, verification time per
//! table, and the rollback's time. The tables' metadata files are written inside the server's
//! (local) warehouse, where Floe may read them.

use std::time::Instant;

use anyhow::{Context, bail};
use clap::Args;
use floe_migrate::{Floe, Migration, Plan};
use reqwest::Method;
use serde_json::{Value, json};

#[derive(Args, Debug, Clone)]
pub struct MigrateBenchArgs {
    #[command(flatten)]
    server: crate::client::ServerArgs,
    /// The target warehouse (local storage: the generated source is written inside it).
    #[arg(long, default_value = "default")]
    warehouse: String,
    /// Tables in the generated source.
    #[arg(long, default_value_t = 1_000)]
    tables: usize,
    /// Snapshots in each table's metadata (its size grows with them).
    #[arg(long, default_value_t = 20)]
    snapshots: usize,
    /// Columns of each table.
    #[arg(long, default_value_t = 20)]
    columns: usize,
}

/// One generated table's metadata file (format version 2).
fn metadata(location: &str, columns: usize, snapshots: usize, seed: usize) -> Value {
    let fields: Vec<Value> = (0..columns)
        .map(|i| {
            let ty = match i % 4 {
                0 => "long",
                1 => "string",
                2 => "double",
                _ => "date",
            };
            json!({"id": i + 1, "name": format!("c{i}"), "required": false, "type": ty})
        })
        .collect();
    let base_ms = 1_700_000_000_000i64 + seed as i64 * 1000;
    let snaps: Vec<Value> = (0..snapshots)
        .map(|s| {
            let id = (seed * 1_000 + s + 1) as i64;
            let mut snap = json!({
                "snapshot-id": id,
                "sequence-number": s + 1,
                "timestamp-ms": base_ms + s as i64 * 60_000,
                "manifest-list": format!("{location}/metadata/snap-{id}-1-{seed:08}.avro"),
                "schema-id": 0,
                "summary": {
                    "operation": "append",
                    "added-data-files": "1",
                    "added-records": "1000",
                    "added-files-size": "65536",
                    "total-data-files": format!("{}", s + 1),
                    "total-records": format!("{}", (s + 1) * 1000),
                    "total-files-size": format!("{}", (s + 1) * 65536),
                    "total-delete-files": "0",
                    "total-position-deletes": "0",
                    "total-equality-deletes": "0"
                }
            });
            if s > 0 {
                snap["parent-snapshot-id"] = json!(id - 1);
            }
            snap
        })
        .collect();
    let last = snaps.last().map(|s| s["snapshot-id"].clone());
    json!({
        "format-version": 2,
        "table-uuid": format!("00000000-0000-4000-8000-{seed:012}"),
        "location": location,
        "last-sequence-number": snapshots,
        "last-updated-ms": base_ms + snapshots as i64 * 60_000,
        "last-column-id": columns,
        "current-schema-id": 0,
        "schemas": [{"type": "struct", "schema-id": 0, "fields": fields}],
        "default-spec-id": 0,
        "partition-specs": [{"spec-id": 0, "fields": [
            {"source-id": 4, "field-id": 1000, "name": "c3_day", "transform": "day"}]}],
        "last-partition-id": 1000,
        "default-sort-order-id": 0,
        "sort-orders": [{"order-id": 0, "fields": []}],
        "properties": {"write.parquet.compression-codec": "zstd"},
        "current-snapshot-id": last.clone().unwrap_or(json!(-1)),
        "refs": last.map(|id| json!({"main": {"snapshot-id": id, "type": "branch"}})).unwrap_or(json!({})),
        "snapshots": snaps,
        "snapshot-log": [],
        "metadata-log": []
    })
}

pub async fn run(args: MigrateBenchArgs) -> anyhow::Result<()> {
    let client = args.server.connect().await?;
    let warehouse = client
        .call(
            Method::GET,
            &format!("/api/v1/warehouses/{}", args.warehouse),
            None,
        )
        .await?;
    let Some(root) = warehouse["storage"]["path"].as_str() else {
        bail!("warehouse {} is not on local storage", args.warehouse);
    };
    let work =
        std::path::Path::new(root).join(format!("bench-migrate-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&work)?;
    let db = work.join("source.db");
    let url = format!("sqlite:{}?mode=rwc", db.display());
    sqlx::any::install_default_drivers();
    let pool = sqlx::any::AnyPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await?;
    sqlx::query(
        "CREATE TABLE iceberg_tables (catalog_name TEXT NOT NULL, table_namespace TEXT NOT NULL, \
         table_name TEXT NOT NULL, metadata_location TEXT, previous_metadata_location TEXT, \
         PRIMARY KEY (catalog_name, table_namespace, table_name))",
    )
    .execute(&pool)
    .await?;

    // The source: `db00.t0000` … with one metadata file each.
    let started = Instant::now();
    let mut metadata_bytes = 0u64;
    for i in 0..args.tables {
        let ns = format!("db{:02}", i % 20);
        let name = format!("t{i:04}");
        let dir = work.join(&ns).join(&name);
        std::fs::create_dir_all(dir.join("metadata"))?;
        let location = format!("file://{}", dir.display());
        let body = serde_json::to_vec(&metadata(&location, args.columns, args.snapshots, i))?;
        metadata_bytes += body.len() as u64;
        let file = dir.join("metadata/00001-bench.metadata.json");
        std::fs::write(&file, body)?;
        sqlx::query("INSERT INTO iceberg_tables VALUES ('bench', $1, $2, $3, NULL)")
            .bind(&ns)
            .bind(&name)
            .bind(format!("file://{}", file.display()))
            .execute(&pool)
            .await?;
    }
    pool.close().await;
    println!(
        "source: {} tables, {:.1} MiB of metadata ({:.1} KiB each), generated in {:.1} s",
        args.tables,
        metadata_bytes as f64 / (1 << 20) as f64,
        metadata_bytes as f64 / 1024.0 / args.tables.max(1) as f64,
        started.elapsed().as_secs_f64()
    );

    let plan_path = work.join("plan.toml");
    let name = format!("bench-{}", uuid::Uuid::now_v7().simple());
    std::fs::write(
        &plan_path,
        format!(
            "name = \"{name}\"\n[source]\nkind = \"jdbc\"\nuri = \"sqlite:{}\"\ncatalog = \"bench\"\n\
             [target]\nwarehouse = \"{}\"\n[mapping]\n{}\n[[waves]]\ntables = [\"*.*\"]\n",
            db.display(),
            args.warehouse,
            (0..20)
                .map(|k| format!("db{k:02} = \"bench_migrate.db{k:02}\""))
                .collect::<Vec<_>>()
                .join("\n")
        ),
    )?;
    let plan = Plan::load(&plan_path)?;
    let source = floe_migrate::source::open(&plan.source).await?;
    let migration = Migration {
        floe: Floe {
            http: client.http.clone(),
            base: client.base.clone(),
            token: client.token.clone(),
            warehouse: args.warehouse.clone(),
        },
        source,
        progress: false,
        plan,
    };

    let started = Instant::now();
    let planned = migration.plan_changes(None).await?;
    let dry_run = started.elapsed().as_secs_f64();
    if planned.iter().any(|o| o.step != "register") {
        bail!("the dry run planned something else than registering every table");
    }

    let started = Instant::now();
    let outcomes = migration.run(1).await?;
    let run = started.elapsed().as_secs_f64();
    let failed = outcomes.iter().filter(|o| o.step != "migrated").count();
    if failed > 0 {
        bail!(
            "{failed} tables did not migrate: {:?}",
            outcomes.iter().find(|o| o.step != "migrated")
        );
    }

    let started = Instant::now();
    let report = migration.verify(None, false).await?;
    let verify = started.elapsed().as_secs_f64();
    if !report.passed || report.tables.len() != args.tables {
        bail!("verification failed");
    }

    let started = Instant::now();
    let rolled = migration.rollback(1).await?;
    let rollback = started.elapsed().as_secs_f64();
    if rolled.iter().any(|o| o.step != "rolled-back") {
        bail!("the rollback did not take every table back");
    }
    std::fs::remove_dir_all(&work).context("remove the generated source")?;
    client
        .call(Method::DELETE, &format!("/api/v1/migrations/{name}"), None)
        .await?;

    let tables = args.tables as f64;
    println!(
        "dry run (plan):    {dry_run:.2} s ({:.2} ms per table)",
        dry_run * 1000.0 / tables
    );
    println!(
        "run (one wave):    {run:.2} s = {:.0} tables/min, {:.2} MiB/s of metadata",
        tables * 60.0 / run,
        metadata_bytes as f64 / (1 << 20) as f64 / run
    );
    println!(
        "verify:            {verify:.2} s ({:.2} ms per table)",
        verify * 1000.0 / tables
    );
    println!(
        "rollback:          {rollback:.2} s ({:.2} ms per table)",
        rollback * 1000.0 / tables
    );
    Ok(())
}
