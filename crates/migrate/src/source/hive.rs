//! A Hive Metastore over Thrift (Apache's metastore 2.3 to 4.x). Iceberg tables registered
//! there (`table_type=ICEBERG`, `metadata_location`) are registered in Floe as they are;
//! Hive tables of Parquet files are converted in place. Tables are read with
//! `get_table_req`, which every metastore since 2.3 answers (4.0 dropped `get_table`).
//!
//! A cut-over sets `floe.migrated-to` on the table (and, for an Iceberg table, points
//! `metadata_location` at Floe's current metadata, so Hive-catalog readers see what Floe
//! holds); the values it replaced are returned and put back by a rollback.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use anyhow::{Context, bail};
use async_trait::async_trait;
use hive_metastore::{
    GetTableRequest, Table, ThriftHiveMetastoreClient, ThriftHiveMetastoreClientBuilder,
};
use pilota::FastStr;
use serde_json::{Value, json};
use volo_thrift::MaybeException;

use super::{HivePartition, HiveTable, Saved, Source, SourceTable, split};

/// The table parameter a cut-over sets.
pub const MIGRATED_TO: &str = "floe.migrated-to";

pub struct HiveSource {
    client: ThriftHiveMetastoreClient,
}

fn answer<T, E: std::fmt::Debug>(
    result: Result<MaybeException<T, E>, volo_thrift::ClientError>,
    what: &str,
) -> anyhow::Result<T> {
    match result {
        Ok(MaybeException::Ok(value)) => Ok(value),
        Ok(MaybeException::Exception(e)) => bail!("{what}: the metastore answered {e:?}"),
        Err(e) => bail!("{what}: {e}"),
    }
}

fn text(value: &Option<FastStr>) -> String {
    value.as_ref().map(|s| s.to_string()).unwrap_or_default()
}

impl HiveSource {
    pub async fn connect(uri: &str) -> anyhow::Result<Self> {
        let authority = uri
            .strip_prefix("thrift://")
            .with_context(|| {
                format!("a Hive Metastore source's uri is thrift://host:port, not {uri}")
            })?
            .trim_end_matches('/');
        let address: SocketAddr = tokio::net::lookup_host(authority)
            .await
            .with_context(|| format!("cannot resolve {authority}"))?
            .next()
            .with_context(|| format!("{authority} resolves to no address"))?;
        let client = ThriftHiveMetastoreClientBuilder::new("hms")
            .address(address)
            // The metastore speaks buffered (not framed) Thrift unless told otherwise.
            .make_codec(volo_thrift::codec::default::DefaultMakeCodec::buffered())
            .build();
        let source = Self { client };
        // Fails early, naming the metastore, when it does not answer.
        answer(
            source.client.get_all_databases().await,
            &format!("list databases of {uri}"),
        )?;
        Ok(source)
    }

    async fn table(&self, table: &str) -> anyhow::Result<Table> {
        let (db, name) = split(table)?;
        let result = answer(
            self.client
                .get_table_req(GetTableRequest {
                    db_name: db.to_string().into(),
                    tbl_name: name.to_string().into(),
                    ..Default::default()
                })
                .await,
            &format!("read table {table}"),
        )?;
        Ok(result.table)
    }

    async fn alter(&self, table: &str, new: Table) -> anyhow::Result<()> {
        let (db, name) = split(table)?;
        answer(
            self.client
                .alter_table(db.to_string().into(), name.to_string().into(), new)
                .await,
            &format!("alter table {table}"),
        )
    }
}

fn parameters(table: &Table) -> BTreeMap<String, String> {
    table
        .parameters
        .as_ref()
        .map(|p| {
            p.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .unwrap_or_default()
}

fn set_parameters(table: &mut Table, values: &BTreeMap<String, Option<String>>) {
    let parameters = table.parameters.get_or_insert_with(Default::default);
    for (key, value) in values {
        match value {
            Some(v) => {
                parameters.insert(key.clone().into(), v.clone().into());
            }
            None => {
                parameters.remove(&FastStr::from(key.clone()));
            }
        }
    }
}

#[async_trait]
impl Source for HiveSource {
    async fn list(&self) -> anyhow::Result<Vec<String>> {
        let databases = answer(self.client.get_all_databases().await, "list databases")?;
        let mut tables = Vec::new();
        for db in databases {
            let names = answer(
                self.client.get_all_tables(db.clone()).await,
                &format!("list tables of {db}"),
            )?;
            tables.extend(names.into_iter().map(|t| format!("{db}.{t}")));
        }
        tables.sort();
        Ok(tables)
    }

    async fn describe(&self, name: &str) -> anyhow::Result<SourceTable> {
        let table = self.table(name).await?;
        let params = parameters(&table);
        let kind = params
            .get("table_type")
            .map(|t| t.to_ascii_uppercase())
            .unwrap_or_default();
        if kind == "ICEBERG" {
            return match params.get("metadata_location") {
                Some(location) => Ok(SourceTable::Iceberg {
                    metadata_location: location.clone(),
                }),
                None => bail!("{name} is an Iceberg table without metadata_location"),
            };
        }
        let table_type = text(&table.table_type);
        if table_type.contains("VIEW") {
            return Ok(SourceTable::Unsupported {
                reason: format!("{name} is a view ({table_type})"),
            });
        }
        let Some(sd) = table.sd.as_ref() else {
            bail!("{name} has no storage descriptor");
        };
        let input = text(&sd.input_format);
        let serde = sd
            .serde_info
            .as_ref()
            .map(|s| text(&s.serialization_lib))
            .unwrap_or_default();
        if !input.contains("Parquet") && !serde.contains("Parquet") {
            return Ok(SourceTable::Unsupported {
                reason: format!("{name} is not stored as Parquet (input format {input:?})"),
            });
        }
        let columns = sd
            .cols
            .iter()
            .flatten()
            .map(|c| (text(&c.name), text(&c.r#type)))
            .collect();
        let partition_keys: Vec<(String, String)> = table
            .partition_keys
            .iter()
            .flatten()
            .map(|c| (text(&c.name), text(&c.r#type)))
            .collect();
        let mut partitions = Vec::new();
        if !partition_keys.is_empty() {
            let (db, t) = split(name)?;
            let listed = answer(
                self.client
                    .get_partitions(db.to_string().into(), t.to_string().into(), -1)
                    .await,
                &format!("list partitions of {name}"),
            )?;
            for partition in listed {
                partitions.push(HivePartition {
                    values: partition
                        .values
                        .iter()
                        .flatten()
                        .map(|v| v.to_string())
                        .collect(),
                    location: partition
                        .sd
                        .as_ref()
                        .map(|sd| text(&sd.location))
                        .unwrap_or_default(),
                });
            }
            partitions.sort_by(|a, b| a.location.cmp(&b.location));
        }
        Ok(SourceTable::Hive(HiveTable {
            location: text(&sd.location),
            columns,
            partition_keys,
            partitions,
        }))
    }

    async fn cut_over(
        &self,
        name: &str,
        floe_table: &str,
        metadata_location: &str,
    ) -> anyhow::Result<Option<Saved>> {
        let mut table = self.table(name).await?;
        let params = parameters(&table);
        let mut changes: BTreeMap<String, Option<String>> =
            BTreeMap::from([(MIGRATED_TO.to_string(), Some(floe_table.to_string()))]);
        if params.get("table_type").map(|t| t.to_ascii_uppercase()) == Some("ICEBERG".into()) {
            changes.insert(
                "metadata_location".into(),
                Some(metadata_location.to_string()),
            );
            changes.insert(
                "previous_metadata_location".into(),
                params.get("metadata_location").cloned(),
            );
        }
        let saved: Value = changes
            .keys()
            .map(|k| (k.clone(), json!(params.get(k))))
            .collect::<serde_json::Map<_, _>>()
            .into();
        set_parameters(&mut table, &changes);
        self.alter(name, table).await?;
        Ok(Some(saved))
    }

    async fn restore(&self, name: &str, saved: &Saved) -> anyhow::Result<()> {
        let mut table = self.table(name).await?;
        // Only the parameters a cut-over sets are put back, whatever else the record holds.
        let values: BTreeMap<String, Option<String>> = saved
            .as_object()
            .context("saved parameters are not an object")?
            .iter()
            .filter(|(k, _)| {
                [
                    MIGRATED_TO,
                    "metadata_location",
                    "previous_metadata_location",
                ]
                .contains(&k.as_str())
            })
            .map(|(k, v)| (k.clone(), v.as_str().map(str::to_string)))
            .collect();
        set_parameters(&mut table, &values);
        self.alter(name, table).await
    }
}

/// An Iceberg schema (JSON) for a Hive table: its columns, then its partition columns.
pub fn iceberg_schema(table: &HiveTable) -> anyhow::Result<Value> {
    let fields: Vec<Value> = table
        .columns
        .iter()
        .chain(&table.partition_keys)
        .enumerate()
        .map(|(i, (name, ty))| {
            Ok(json!({
                "id": i + 1,
                "name": name,
                "required": false,
                "type": iceberg_type(ty).with_context(|| format!("column {name}"))?,
            }))
        })
        .collect::<anyhow::Result<_>>()?;
    Ok(json!({"type": "struct", "schema-id": 0, "fields": fields}))
}

/// The Iceberg type of a Hive primitive type.
fn iceberg_type(hive: &str) -> anyhow::Result<String> {
    let lower = hive.trim().to_ascii_lowercase();
    let base = lower.split('(').next().unwrap_or("").trim();
    Ok(match base {
        "boolean" => "boolean".into(),
        "tinyint" | "smallint" | "int" | "integer" => "int".into(),
        "bigint" => "long".into(),
        "float" => "float".into(),
        "double" | "double precision" => "double".into(),
        "string" | "varchar" | "char" => "string".into(),
        "binary" => "binary".into(),
        "date" => "date".into(),
        "timestamp" => "timestamp".into(),
        "decimal" | "numeric" => {
            let args: Vec<&str> = lower
                .trim_start_matches(base)
                .trim_matches(|c| c == '(' || c == ')' || c == ' ')
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect();
            match args.as_slice() {
                [] => "decimal(10, 0)".into(),
                [p] => format!("decimal({p}, 0)"),
                [p, s] => format!("decimal({p}, {s})"),
                _ => bail!("cannot read type {hive}"),
            }
        }
        _ => bail!(
            "type {hive} is not converted (primitive columns only: boolean, integers, float, \
             double, decimal, string, varchar, char, binary, date, timestamp)"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hive_types_map_to_iceberg_types() {
        assert_eq!(iceberg_type("BIGINT").unwrap(), "long");
        assert_eq!(iceberg_type("varchar(20)").unwrap(), "string");
        assert_eq!(iceberg_type("decimal(12,2)").unwrap(), "decimal(12, 2)");
        assert!(iceberg_type("array<int>").is_err());
        let schema = iceberg_schema(&HiveTable {
            location: "file:///w/t".into(),
            columns: vec![("id".into(), "bigint".into())],
            partition_keys: vec![("day".into(), "string".into())],
            partitions: Vec::new(),
        })
        .unwrap();
        assert_eq!(schema["fields"][1]["name"], "day");
        assert_eq!(schema["fields"][1]["id"], 2);
    }
}
