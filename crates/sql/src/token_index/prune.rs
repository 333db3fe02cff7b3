//! Pruning a scan's data files by their token indexes.
//!
//! From a scan's filters (a conjunction), the predicates an index can decide: for a column
//! the table indexes, `matches(col, 'text')` (every token of the text), `col LIKE 'pattern'`
//! (the tokens [`super::tokens::like_tokens`] derives: those the pattern holds whole), and
//! `col = 'text'` (every token of the text), combined by `AND` and `OR`. A data file is
//! dropped only when its index, read and checked ([`super::file::parse`]), holds for that
//! column a filter that lacks one of the tokens every matching row would have — so no row of
//! it could pass the filter. Anything else keeps the file: a predicate the index cannot
//! decide, a column not indexed in the file, a file without an index (written before indexing
//! or by another engine), an index that is missing, malformed, oversized, built for another
//! file or row count, or unreadable just now. The filters are still evaluated on every row
//! read: the index only removes files, never decides a row.
//!
//! Indexes are read whole (one request per file, at most [`super::file::MAX_FILE_BYTES`])
//! and kept in memory by data file (data files never change), so a search repeated on a
//! table reads no index again; a data file without an index is remembered as such too.

use std::sync::Arc;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};

use datafusion::common::ScalarValue;
use datafusion::logical_expr::{Expr, Operator};
use futures::StreamExt;
use iceberg::scan::FileScanTask;
use iceberg::spec::TableMetadata;

use super::file::{FileIndex, MAX_FILE_BYTES, index_location, parse};
use super::tokens::{like_tokens, tokens};
use crate::scan::provider::TableFiles;

/// Indexes read at once while planning a scan.
const CONCURRENT_READS: usize = 32;
/// Memory the kept indexes may take, over all tables.
const KEPT_BYTES: u64 = 512 << 20;

/// What a file must hold for a row of it to pass the filters.
#[derive(Debug, Clone, PartialEq)]
enum Need {
    /// Every one of these tokens in the column of this field id.
    Tokens(i32, Vec<String>),
    All(Vec<Need>),
    Any(Vec<Need>),
}

impl Need {
    /// Whether a file with `index` (none: no usable index) may hold a row that needs this.
    fn may_hold(&self, index: Option<&FileIndex>) -> bool {
        match self {
            Need::Tokens(field_id, tokens) => index
                .and_then(|i| i.columns.get(field_id))
                .is_none_or(|bloom| tokens.iter().all(|t| bloom.may_contain(t))),
            Need::All(needs) => needs.iter().all(|n| n.may_hold(index)),
            Need::Any(needs) => needs.iter().any(|n| n.may_hold(index)),
        }
    }
}

/// What `expr` needs of a file, when an index can tell (`None`: anything may match). `column`
/// gives the field id of an indexed column by name.
fn need_of(expr: &Expr, column: &impl Fn(&Expr) -> Option<i32>) -> Option<Need> {
    let tokens_of = |field_id: i32, found: Vec<String>| {
        (!found.is_empty()).then_some(Need::Tokens(field_id, found))
    };
    match expr {
        Expr::BinaryExpr(binary) => match binary.op {
            Operator::And => {
                let needs: Vec<Need> = [&binary.left, &binary.right]
                    .into_iter()
                    .filter_map(|side| need_of(side, column))
                    .collect();
                (!needs.is_empty()).then_some(Need::All(needs))
            }
            Operator::Or => Some(Need::Any(vec![
                need_of(&binary.left, column)?,
                need_of(&binary.right, column)?,
            ])),
            Operator::Eq => {
                let (field_id, text) = match (column(&binary.left), text(&binary.right)) {
                    (Some(id), Some(text)) => (id, text),
                    _ => (column(&binary.right)?, text(&binary.left)?),
                };
                tokens_of(field_id, tokens(text))
            }
            _ => None,
        },
        Expr::Like(like) => {
            let escape_ok = like.escape_char.is_none_or(|c| c == '\\');
            if like.negated || like.case_insensitive || !escape_ok {
                return None;
            }
            tokens_of(column(&like.expr)?, like_tokens(text(&like.pattern)?)?)
        }
        Expr::ScalarFunction(call) if call.name() == super::matches::NAME => {
            let [target, query] = call.args.as_slice() else {
                return None;
            };
            tokens_of(column(target)?, tokens(text(query)?))
        }
        _ => None,
    }
}

/// A string literal's text.
fn text(expr: &Expr) -> Option<&str> {
    match expr {
        Expr::Literal(
            ScalarValue::Utf8(Some(s))
            | ScalarValue::Utf8View(Some(s))
            | ScalarValue::LargeUtf8(Some(s)),
            _,
        ) => Some(s),
        _ => None,
    }
}

/// What a scan's `filters` need of a file, for the columns `metadata`'s table indexes.
fn need_of_filters(metadata: &TableMetadata, filters: &[Expr]) -> Option<Need> {
    let indexed = super::indexed_columns(metadata);
    if indexed.is_empty() {
        return None;
    }
    let column = |expr: &Expr| -> Option<i32> {
        let mut expr = expr;
        // A cast between string types changes no character.
        while let Expr::Cast(cast) = expr {
            if !matches!(
                cast.field.data_type(),
                datafusion::arrow::datatypes::DataType::Utf8
                    | datafusion::arrow::datatypes::DataType::Utf8View
                    | datafusion::arrow::datatypes::DataType::LargeUtf8
            ) {
                return None;
            }
            expr = &cast.expr;
        }
        let Expr::Column(c) = expr else {
            return None;
        };
        indexed
            .iter()
            .find(|i| i.name == c.name)
            .map(|i| i.field_id)
    };
    let needs: Vec<Need> = filters.iter().filter_map(|f| need_of(f, &column)).collect();
    (!needs.is_empty()).then_some(Need::All(needs))
}

/// Counters since the process started.
static FILES_PRUNED: AtomicU64 = AtomicU64::new(0);
static FILES_KEPT: AtomicU64 = AtomicU64::new(0);
static INDEXES_READ: AtomicU64 = AtomicU64::new(0);
static INDEX_BYTES_READ: AtomicU64 = AtomicU64::new(0);
static INDEXES_UNUSABLE: AtomicU64 = AtomicU64::new(0);

/// What token indexes did since the process started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenIndexStats {
    /// Data files a search did not read, their index proving no row could match.
    pub files_pruned: u64,
    /// Data files a search that could use an index read nonetheless.
    pub files_kept: u64,
    /// Index files read from storage (not from memory).
    pub indexes_read: u64,
    /// Bytes of index files read from storage.
    pub index_bytes_read: u64,
    /// Index files found but not usable (malformed, oversized, built for another file).
    pub indexes_unusable: u64,
}

pub fn stats() -> TokenIndexStats {
    TokenIndexStats {
        files_pruned: FILES_PRUNED.load(Ordering::Relaxed),
        files_kept: FILES_KEPT.load(Ordering::Relaxed),
        indexes_read: INDEXES_READ.load(Ordering::Relaxed),
        index_bytes_read: INDEX_BYTES_READ.load(Ordering::Relaxed),
        indexes_unusable: INDEXES_UNUSABLE.load(Ordering::Relaxed),
    }
}

/// A data file's index as kept: the row count it was checked against, and the index (none
/// when the file has no usable one).
struct Kept {
    records: u64,
    index: Option<FileIndex>,
}

static KEPT: LazyLock<moka::future::Cache<String, Arc<Kept>>> = LazyLock::new(|| {
    moka::future::Cache::builder()
        .max_capacity(KEPT_BYTES)
        .weigher(|path: &String, kept: &Arc<Kept>| {
            let size = path.len() + kept.index.as_ref().map_or(16, FileIndex::size);
            u32::try_from(size).unwrap_or(u32::MAX)
        })
        .build()
});

/// Forgets every index kept, so the next searches read them again (for benchmarks).
pub fn forget_indexes() {
    KEPT.invalidate_all();
}

/// The index of the data file at `data_file` (`records` rows), from memory or read; `None`
/// when it has none that is usable. A read that fails for another reason than the file's
/// absence is not remembered: the next search tries again.
async fn index_of(files: &TableFiles, data_file: &str, records: u64) -> Option<Arc<Kept>> {
    if let Some(kept) = KEPT.get(data_file).await
        && kept.records == records
    {
        return Some(kept);
    }
    let kept = Arc::new(Kept {
        records,
        index: read(files, data_file, records).await.ok()?,
    });
    KEPT.insert(data_file.to_string(), kept.clone()).await;
    Some(kept)
}

/// Reads and checks the index of `data_file`: `Ok(None)` when there is none or it is not
/// usable, `Err` when storage failed to answer.
async fn read(files: &TableFiles, data_file: &str, records: u64) -> Result<Option<FileIndex>, ()> {
    let Ok(path) = files.path(&index_location(data_file)) else {
        return Ok(None);
    };
    let found = match object_store::ObjectStoreExt::get(&files.store, &path.into()).await {
        Ok(found) => found,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => {
            tracing::debug!(file = data_file, error = %e, "read the token index of a data file");
            return Err(());
        }
    };
    INDEXES_READ.fetch_add(1, Ordering::Relaxed);
    if found.meta.size > MAX_FILE_BYTES {
        INDEXES_UNUSABLE.fetch_add(1, Ordering::Relaxed);
        return Ok(None);
    }
    let bytes = found.bytes().await.map_err(|_| ())?;
    INDEX_BYTES_READ.fetch_add(bytes.len() as u64, Ordering::Relaxed);
    let index = parse(&bytes, data_file, records);
    if index.is_none() {
        INDEXES_UNUSABLE.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            file = data_file,
            "leave a data file unpruned: its token index is not usable"
        );
    }
    Ok(index)
}

/// `tasks` without the data files whose indexes prove no row of them passes `filters`.
pub(crate) async fn prune(
    metadata: &TableMetadata,
    files: &TableFiles,
    filters: &[Expr],
    tasks: Vec<FileScanTask>,
) -> Vec<FileScanTask> {
    let Some(need) = need_of_filters(metadata, filters) else {
        return tasks;
    };
    let need = &need;
    let decided: Vec<(FileScanTask, bool)> = futures::stream::iter(tasks)
        .map(|task| async move {
            let Some(records) = task.record_count else {
                return (task, true);
            };
            let kept = index_of(files, &task.data_file_path, records).await;
            let may_hold = need.may_hold(kept.as_ref().and_then(|k| k.index.as_ref()));
            (task, may_hold)
        })
        .buffered(CONCURRENT_READS)
        .collect()
        .await;
    let mut kept = Vec::with_capacity(decided.len());
    for (task, may_hold) in decided {
        if may_hold {
            kept.push(task);
        } else {
            FILES_PRUNED.fetch_add(1, Ordering::Relaxed);
        }
    }
    FILES_KEPT.fetch_add(kept.len() as u64, Ordering::Relaxed);
    kept
}

#[cfg(test)]
mod tests {
    use datafusion::logical_expr::{col, lit};

    use super::*;

    fn need(expr: Expr) -> Option<Need> {
        let column = |e: &Expr| match e {
            Expr::Column(c) if c.name == "body" => Some(6),
            _ => None,
        };
        need_of(&expr, &column)
    }

    fn tokens(of: &[&str]) -> Need {
        Need::Tokens(6, of.iter().map(|t| t.to_string()).collect())
    }

    fn matches(column: &str, text: &str) -> Expr {
        super::super::matches::udf().call(vec![col(column), lit(text)])
    }

    #[test]
    fn the_predicates_an_index_decides() {
        assert_eq!(
            need(matches("body", "Timeout GATEWAY")),
            Some(tokens(&["timeout", "gateway"]))
        );
        assert_eq!(
            need(col("body").like(lit("% timeout %"))),
            Some(tokens(&["timeout"]))
        );
        assert_eq!(need(col("body").eq(lit("a b"))), Some(tokens(&["a", "b"])));
        assert_eq!(
            need(matches("body", "x").or(matches("body", "y"))),
            Some(Need::Any(vec![tokens(&["x"]), tokens(&["y"])]))
        );
        assert_eq!(
            need(matches("body", "x").and(col("other").eq(lit(1)))),
            Some(Need::All(vec![tokens(&["x"])]))
        );
    }

    #[test]
    fn what_an_index_cannot_decide_keeps_every_file() {
        // A word inside a longer token, a negation, case folding, another column, no token.
        assert_eq!(need(col("body").like(lit("%timeout%"))), None);
        assert_eq!(need(col("body").not_like(lit("% timeout %"))), None);
        assert_eq!(need(col("body").ilike(lit("% timeout %"))), None);
        assert_eq!(need(matches("other", "x")), None);
        assert_eq!(need(matches("body", " - ")), None);
        assert_eq!(need(matches("body", "x").or(col("other").eq(lit(1)))), None);
        assert_eq!(need(col("body").not_eq(lit("x"))), None);
        // A file without an index may hold anything.
        assert!(tokens(&["x"]).may_hold(None));
    }
}
