//! Runs the sqllogictest suites in `tests/slt/` against Floe's SQL engine over a fresh
//! embedded catalog (SQLite store, local warehouse `default`) per file.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use floe_catalog::governance::authz::Caller;
use floe_catalog::service::{CatalogConfig, CatalogService};
use floe_sql::{EngineConfig, QueryOptions, SqlEngine, SqlError};
use floe_storage::StorageProfile;
use futures::TryStreamExt;
use sqllogictest::{AsyncDB, DBOutput, DefaultColumnType};

struct Floe {
    engine: SqlEngine,
    _dir: tempfile::TempDir,
}

#[async_trait::async_trait]
impl AsyncDB for Floe {
    type Error = SqlError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, SqlError> {
        let result = self
            .engine
            .query(&Caller::system(), sql, &QueryOptions::default())
            .await?;
        let batches: Vec<RecordBatch> =
            result.stream.try_collect().await.map_err(SqlError::from)?;
        let is_statement = result.schema.fields().len() == 1
            && result.schema.field(0).name() == "count"
            && !sql.trim_start().to_ascii_lowercase().starts_with("select");
        if is_statement {
            return Ok(DBOutput::StatementComplete(0));
        }
        let options = FormatOptions::default().with_null("NULL");
        let mut rows = Vec::new();
        for batch in &batches {
            let formatters: Vec<ArrayFormatter> = batch
                .columns()
                .iter()
                .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).expect("printable column"))
                .collect();
            for row in 0..batch.num_rows() {
                rows.push(
                    formatters
                        .iter()
                        .map(|f| f.value(row).to_string())
                        .collect(),
                );
            }
        }
        Ok(DBOutput::Rows {
            types: vec![DefaultColumnType::Any; result.schema.fields().len()],
            rows,
        })
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "floe"
    }
}

async fn fresh() -> Floe {
    let dir = tempfile::tempdir().unwrap();
    let store = floe_store::SqlStore::connect(
        &format!("sqlite:{}/catalog.db", dir.path().display()),
        Default::default(),
    )
    .await
    .unwrap();
    let service = Arc::new(CatalogService::new(
        Arc::new(store),
        CatalogConfig::default(),
    ));
    service
        .create_warehouse(
            &Caller::system(),
            "default",
            StorageProfile::Local {
                path: dir.path().join("warehouse").to_string_lossy().into_owned(),
            },
            Default::default(),
        )
        .await
        .unwrap();
    Floe {
        engine: SqlEngine::new(service, EngineConfig::default()).unwrap(),
        _dir: dir,
    }
}

fn suites() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/slt");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .collect();
    files.sort();
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqllogictest_suites() {
    let files = suites();
    assert!(!files.is_empty(), "no .slt files found");
    for file in files {
        let mut runner = sqllogictest::Runner::new(|| async { Ok(fresh().await) });
        runner.with_column_validator(sqllogictest::default_column_validator);
        if let Err(e) = runner.run_file_async(&file).await {
            panic!("{}: {e}", file.display());
        }
    }
}
