//! `floe sql`: run SQL against a running server (as a principal) or embedded on a data
//! directory (as root), from `-e`, `-f` or an interactive prompt.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use floe_catalog::governance::GovernanceStore;
use floe_catalog::governance::audit::{AuditEvent, AuditStore};
use floe_catalog::governance::authz::{Caller, GrantSet};
use floe_catalog::service::{CatalogConfig, CatalogService};
use floe_sql::{EngineConfig, QueryOptions, SqlEngine};
use floe_store::{SqlStore, StoreOptions};
use futures::TryStreamExt;

use crate::client::ServerArgs;

#[derive(Args)]
pub struct SqlArgs {
    /// Run this statement and exit.
    #[arg(short = 'e', long = "execute", conflicts_with = "file")]
    pub execute: Option<String>,
    /// Run the statements in this file (separated by `;`) and exit.
    #[arg(short = 'f', long)]
    pub file: Option<PathBuf>,
    /// How results are printed.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// The catalog of `schema.table` names.
    #[arg(long, default_value = "default")]
    pub warehouse: String,
    /// The schema of bare table names.
    #[arg(long, default_value = "default")]
    pub namespace: String,
    /// Run in this process on the data directory's catalog, as root, instead of asking a
    /// running server.
    #[arg(long)]
    pub embedded: bool,
    /// Data directory (embedded mode).
    #[arg(long, env = "FLOE_DATA_DIR", default_value = "./floe-data")]
    pub data_dir: PathBuf,
    /// Catalog database (embedded mode), instead of the data directory's.
    #[arg(long, env = "FLOE_CATALOG_DB", hide_env_values = true)]
    pub catalog_db: Option<String>,
    #[command(flatten)]
    pub server: ServerArgs,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Format {
    Table,
    Csv,
    Json,
}

/// Where statements run.
enum Target {
    Remote(crate::client::Client),
    Embedded {
        engine: Box<SqlEngine>,
        caller: Caller,
        audit: Arc<SqlStore>,
    },
}

pub async fn run(args: SqlArgs) -> anyhow::Result<()> {
    let target = if args.embedded {
        embedded(&args).await?
    } else {
        Target::Remote(args.server.connect().await?)
    };
    let options = QueryOptions {
        warehouse: Some(args.warehouse.clone()),
        namespace: Some(args.namespace.clone()),
        ..Default::default()
    };
    if let Some(statement) = &args.execute {
        return run_one(&target, statement, &options, args.format).await;
    }
    if let Some(file) = &args.file {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("read {}", file.display()))?;
        for statement in split_statements(&text) {
            run_one(&target, &statement, &options, args.format).await?;
        }
        return Ok(());
    }
    repl(&target, &options, args.format).await
}

async fn embedded(args: &SqlArgs) -> anyhow::Result<Target> {
    let url = match &args.catalog_db {
        Some(url) => url.clone(),
        None => {
            let path = args.data_dir.join("catalog.db");
            if !path.is_file() {
                bail!(
                    "no catalog database at {} (start `floe serve` once, or pass --catalog-db)",
                    path.display()
                );
            }
            format!("sqlite:{}", path.display())
        }
    };
    let store = Arc::new(SqlStore::connect(&url, StoreOptions::default()).await?);
    let catalog = Arc::new(CatalogService::new(store.clone(), CatalogConfig::default()));
    let engine = SqlEngine::new(catalog, EngineConfig::default())?;
    let root = GovernanceStore::root_principal(store.as_ref())
        .await?
        .context("the catalog has no root principal yet: start `floe serve` once")?;
    Ok(Target::Embedded {
        engine: Box::new(engine),
        caller: Caller {
            principal: root,
            grants: Arc::new(GrantSet::everything()),
        },
        audit: store,
    })
}

async fn run_one(
    target: &Target,
    statement: &str,
    options: &QueryOptions,
    format: Format,
) -> anyhow::Result<()> {
    let (schema, batches) = match target {
        Target::Remote(client) => remote(client, statement, options).await?,
        Target::Embedded {
            engine,
            caller,
            audit,
        } => {
            let outcome = async {
                let result = engine.query(caller, statement, options).await?;
                let batches: Vec<RecordBatch> = result
                    .stream
                    .try_collect()
                    .await
                    .map_err(floe_sql::SqlError::from)?;
                Ok::<_, floe_sql::SqlError>((result.schema, batches))
            }
            .await;
            audit_embedded(audit, caller, statement, outcome.is_ok()).await?;
            outcome?
        }
    };
    print(&schema, &batches, format)
}

/// Embedded statements are audited like the server's, as root from this machine.
async fn audit_embedded(
    store: &SqlStore,
    caller: &Caller,
    statement: &str,
    ok: bool,
) -> anyhow::Result<()> {
    store
        .append_audit(vec![AuditEvent {
            at_ms: floe_catalog::clock::now_ms(),
            request_id: uuid::Uuid::now_v7().to_string(),
            principal: caller.principal.name.clone(),
            action: "SQL (embedded)".into(),
            resource: "floe sql --embedded".into(),
            decision: "allow".into(),
            status: if ok { 200 } else { 400 },
            client: "local".into(),
            details: serde_json::json!({ "statement": statement }).to_string(),
        }])
        .await?;
    Ok(())
}

async fn remote(
    client: &crate::client::Client,
    statement: &str,
    options: &QueryOptions,
) -> anyhow::Result<(SchemaRef, Vec<RecordBatch>)> {
    let response = client
        .request(reqwest::Method::POST, "/api/v1/sql")
        .header("accept", floe_server::management::sql::ARROW_STREAM)
        .json(&serde_json::json!({
            "sql": statement,
            "warehouse": options.warehouse,
            "namespace": options.namespace,
        }))
        .send()
        .await
        .context("send the statement")?;
    let status = response.status();
    let bytes = response.bytes().await.context(
        "read the answer (a statement that fails after its first rows ends an Arrow answer \
         early; the server's log says why)",
    )?;
    if !status.is_success() {
        let message = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
            .unwrap_or_else(|| String::from_utf8_lossy(&bytes).into_owned());
        bail!("{message} ({status})");
    }
    let reader =
        datafusion::arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)?;
    let schema = reader.schema();
    let batches = reader.collect::<Result<Vec<_>, _>>()?;
    Ok((schema, batches))
}

fn print(schema: &SchemaRef, batches: &[RecordBatch], format: Format) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    match format {
        Format::Table => {
            let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
            if schema.fields().is_empty() {
                println!("OK");
            } else {
                let empty = RecordBatch::new_empty(schema.clone());
                let shown = if batches.is_empty() {
                    std::slice::from_ref(&empty)
                } else {
                    batches
                };
                println!(
                    "{}",
                    datafusion::arrow::util::pretty::pretty_format_batches(shown)?
                );
                println!("({rows} row{})", if rows == 1 { "" } else { "s" });
            }
        }
        Format::Csv => {
            let mut writer = datafusion::arrow::csv::WriterBuilder::new()
                .with_header(true)
                .build(stdout.lock());
            for batch in batches {
                writer.write(batch)?;
            }
        }
        Format::Json => {
            let mut writer = datafusion::arrow::json::LineDelimitedWriter::new(stdout.lock());
            for batch in batches {
                writer.write(batch)?;
            }
            writer.finish()?;
        }
    }
    Ok(())
}

/// Statements of a script: split at `;` outside quotes and comments.
fn split_statements(text: &str) -> Vec<String> {
    let mut statements = Vec::new();
    let mut current = String::new();
    let mut chars = text.chars().peekable();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match quote {
            Some(q) => {
                current.push(c);
                if c == q {
                    quote = None;
                }
            }
            None => match c {
                '\'' | '"' => {
                    quote = Some(c);
                    current.push(c);
                }
                '-' if chars.peek() == Some(&'-') => {
                    // A comment runs to the end of the line.
                    for c in chars.by_ref() {
                        if c == '\n' {
                            current.push('\n');
                            break;
                        }
                    }
                }
                ';' => {
                    if !current.trim().is_empty() {
                        statements.push(current.trim().to_string());
                    }
                    current.clear();
                }
                _ => current.push(c),
            },
        }
    }
    if !current.trim().is_empty() {
        statements.push(current.trim().to_string());
    }
    statements
}

/// An interactive prompt: statements end with `;` and may span lines; history is kept in
/// `~/.floe_sql_history`. Without a terminal, statements are read from standard input.
async fn repl(target: &Target, options: &QueryOptions, format: Format) -> anyhow::Result<()> {
    if !std::io::stdin().is_terminal() {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)?;
        for statement in split_statements(&text) {
            if let Err(e) = run_one(target, &statement, options, format).await {
                eprintln!("error: {e:#}");
            }
        }
        return Ok(());
    }
    let mut editor = rustyline::DefaultEditor::new()?;
    let history = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".floe_sql_history"));
    if let Some(path) = &history {
        let _ = editor.load_history(path);
    }
    let mut pending = String::new();
    loop {
        let prompt = if pending.is_empty() {
            "floe> "
        } else {
            "   -> "
        };
        match editor.readline(prompt) {
            Ok(line) => {
                pending.push_str(&line);
                pending.push('\n');
                if !line.trim_end().ends_with(';') {
                    continue;
                }
                let _ = editor.add_history_entry(pending.trim());
                for statement in split_statements(&pending) {
                    if let Err(e) = run_one(target, &statement, options, format).await {
                        eprintln!("error: {e:#}");
                    }
                }
                pending.clear();
            }
            Err(rustyline::error::ReadlineError::Interrupted) => pending.clear(),
            Err(rustyline::error::ReadlineError::Eof) => break,
            Err(e) => return Err(e.into()),
        }
    }
    if let Some(path) = &history {
        let _ = editor.save_history(path);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::split_statements;

    #[test]
    fn scripts_split_at_semicolons_outside_quotes_and_comments() {
        assert_eq!(
            split_statements("select 1; -- a; comment\nselect ';' as s;\n\n select \"a;b\" from t"),
            vec!["select 1", "select ';' as s", "select \"a;b\" from t"]
        );
    }
}
