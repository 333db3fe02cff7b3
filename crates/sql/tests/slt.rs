//! Runs the sqllogictest suites in `tests/slt/` against Floe's SQL engine over a fresh
//! embedded catalog (SQLite store, local warehouse `default`) per file.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::error::DataFusionError;
use floe_catalog::governance::authz::Caller;
use floe_sql::{EngineConfig, QueryOptions, SqlEngine, SqlError};
use futures::TryStreamExt;
use sqllogictest::{AsyncDB, DBOutput, DefaultColumnType};

mod common;

struct Floe {
    engine: SqlEngine,
    _dir: tempfile::TempDir,
}

#[async_trait::async_trait]
impl AsyncDB for Floe {
    type Error = SqlError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, SqlError> {
        // A statement that hangs fails its record rather than the whole run's time.
        tokio::time::timeout(std::time::Duration::from_secs(120), self.answer(sql))
            .await
            .unwrap_or_else(|_| {
                Err(SqlError::from(DataFusionError::Execution(format!(
                    "no answer in 120 s: {sql}"
                ))))
            })
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "floe"
    }
}

impl Floe {
    async fn answer(&self, sql: &str) -> Result<DBOutput<DefaultColumnType>, SqlError> {
        travels(&self.engine, sql).await?;
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
}

/// A query's plan must travel to a worker and come back the same (its scans' access plans,
/// adapter and reader included); a statement that does not plan is left to fail as it runs.
async fn travels(engine: &SqlEngine, sql: &str) -> Result<(), SqlError> {
    let head = sql.trim_start().to_ascii_lowercase();
    if !(head.starts_with("select") || head.starts_with("with")) {
        return Ok(());
    }
    let Ok(plan) = engine
        .distributable_plan(&Caller::system(), sql, &QueryOptions::default())
        .await
    else {
        return Ok(());
    };
    floe_sql::distributed::round_trip(engine, plan)
        .await
        .map_err(SqlError::from)
}

async fn fresh() -> Floe {
    let dir = tempfile::tempdir().unwrap();
    Floe {
        engine: common::engine_in(&dir, EngineConfig::default()).await,
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

/// The plan text of `EXPLAIN ANALYZE sql`.
async fn analyzed(floe: &Floe, sql: &str) -> String {
    plan_text(floe, &format!("EXPLAIN ANALYZE {sql}")).await
}

/// The plans an `EXPLAIN` statement prints, one after the other.
async fn plan_text(floe: &Floe, explain: &str) -> String {
    let result = floe
        .engine
        .query(&Caller::system(), explain, &QueryOptions::default())
        .await
        .unwrap();
    let batches: Vec<RecordBatch> = result.stream.try_collect().await.unwrap();
    let options = FormatOptions::default();
    let mut text = String::new();
    for batch in &batches {
        let plan = ArrayFormatter::try_new(batch.column(1).as_ref(), &options).unwrap();
        for row in 0..batch.num_rows() {
            text.push_str(&plan.value(row).to_string());
            text.push('\n');
        }
    }
    text
}

/// The rows `sql` gives, each value as text.
async fn rows_of(floe: &mut Floe, sql: &str) -> Vec<Vec<String>> {
    let Ok(DBOutput::Rows { rows, .. }) = floe.run(sql).await else {
        panic!("{sql} gives rows");
    };
    rows
}

/// Runs each of `statements`, which must succeed.
async fn run_all(floe: &mut Floe, statements: &[&str]) {
    for sql in statements {
        floe.run(sql).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_keys_filter_the_rows_under_an_aggregation() {
    let mut floe = fresh().await;
    run_all(
        &mut floe,
        &[
            "CREATE SCHEMA rf",
            "CREATE TABLE rf.dim (k BIGINT, tag VARCHAR)",
            "INSERT INTO rf.dim VALUES (1, 'keep'), (2, 'drop'), (3, 'keep')",
            "CREATE TABLE rf.fact (k BIGINT, v BIGINT)",
            "INSERT INTO rf.fact SELECT value % 50, value FROM generate_series(1, 5000) AS t(value)",
        ],
    )
    .await;
    let query = "SELECT sum(f.v) FROM rf.fact f JOIN rf.dim d ON f.k = d.k \
                 WHERE d.tag = 'keep' AND f.v > (SELECT avg(v) FROM rf.fact f2 WHERE f2.k = d.k)";
    let plan = analyzed(&floe, query).await;
    // The subquery's scan of 5,000 rows is cut to the 200 of keys 1 and 3 before it is
    // aggregated.
    let filter = plan
        .lines()
        .find(|l| {
            l.trim_start()
                .starts_with("FilterExec: RuntimeFilter(DynamicFilter")
        })
        .unwrap_or_else(|| panic!("no runtime filter above the fact scan:\n{plan}"));
    assert!(filter.contains("output_rows=200,"), "{filter}");
    // And the answer is the join's.
    assert_eq!(
        rows_of(&mut floe, query).await,
        vec![vec!["372700".to_string()]]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_keys_past_the_in_list_limit_filter_the_probe_rows_as_a_bitmap() {
    let mut floe = fresh().await;
    run_all(
        &mut floe,
        &[
            "CREATE SCHEMA bk",
            "CREATE TABLE bk.dim (k BIGINT, tag VARCHAR)",
            // Every fourth of 20,000 keys is kept: 5,000 build keys, past the 4,096 that a
            // join publishes as an IN list.
            "INSERT INTO bk.dim SELECT value, CASE WHEN value % 4 = 0 THEN 'keep' ELSE 'drop' END \
             FROM generate_series(1, 20000) AS t(value)",
            "INSERT INTO bk.dim VALUES (NULL, 'keep')",
            "CREATE TABLE bk.fact (k BIGINT, v BIGINT)",
            "INSERT INTO bk.fact SELECT value % 40000, value FROM generate_series(1, 200000) AS t(value)",
            "INSERT INTO bk.fact VALUES (NULL, 7)",
        ],
    )
    .await;
    let query = "SELECT count(*), sum(f.v) FROM bk.fact f JOIN bk.dim d ON f.k = d.k \
                 WHERE d.tag = 'keep'";
    let plan = analyzed(&floe, query).await;
    assert!(plan.contains("CollectKeysExec: key=k@"), "{plan}");
    // The fact scan hands the join only the 25,000 rows of kept keys (5 each).
    let filter = plan
        .lines()
        .find(|l| l.trim_start().starts_with("FilterExec: RuntimeFilter("))
        .unwrap_or_else(|| panic!("no runtime filter above the fact scan:\n{plan}"));
    assert!(filter.contains("output_rows=25.00 K,"), "{filter}");
    assert_eq!(
        rows_of(&mut floe, query).await,
        vec![vec!["25000".to_string(), "2250050000".to_string()]]
    );
    // A semi join of the same keys, and an anti join that must keep the unmatched rows.
    let semi = "SELECT count(*) FROM bk.fact WHERE k IN (SELECT k FROM bk.dim WHERE tag = 'keep')";
    assert_eq!(
        rows_of(&mut floe, semi).await,
        vec![vec!["25000".to_string()]]
    );
    let anti = "SELECT count(*) FROM bk.fact f WHERE NOT EXISTS \
                (SELECT 1 FROM bk.dim d WHERE d.k = f.k AND d.tag = 'keep')";
    assert_eq!(
        rows_of(&mut floe, anti).await,
        vec![vec!["175001".to_string()]]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_common_table_expression_used_twice_is_aggregated_once() {
    let mut floe = fresh().await;
    run_all(
        &mut floe,
        &[
            "CREATE SCHEMA sa",
            "CREATE TABLE sa.sales (store BIGINT, amount BIGINT)",
            "INSERT INTO sa.sales SELECT value % 5, value FROM generate_series(1, 1000) AS t(value)",
        ],
    )
    .await;
    let query = "WITH t AS (SELECT store, sum(amount) AS total FROM sa.sales GROUP BY store) \
                 SELECT a.store, b.store FROM t a JOIN t b ON a.total = b.total + 200";
    let plan = analyzed(&floe, query).await;
    assert!(
        plan.contains("SharedExec: computed once for 2 consumers"),
        "{plan}"
    );
    // Both places show the one shared scan, which read the table's 1,000 rows once.
    let scans: Vec<&str> = plan
        .lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with("DataSourceExec"))
        .collect();
    assert_eq!(scans.len(), 2, "{plan}");
    assert_eq!(scans[0], scans[1]);
    assert!(scans[0].contains("output_rows=1.00 K,"), "{}", scans[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_pinned_to_its_base_conflicts_instead_of_being_rebased() {
    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use iceberg::TableIdent;
    use iceberg::transaction::{ApplyTransactionAction, Transaction};

    let mut floe = fresh().await;
    floe.run("CREATE SCHEMA p").await.unwrap();
    floe.run("CREATE TABLE p.t (id BIGINT)").await.unwrap();
    let caller = Caller::system();
    let access = floe.engine.access(&caller, "default").await.unwrap();
    let ident = TableIdent::from_strs(["p", "t"]).unwrap();
    let loaded = floe
        .engine
        .catalog()
        .load_table(&caller, "default", &ident)
        .await
        .unwrap();
    let base = floe_sql::write::table_of(&access, loaded).unwrap();
    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, true)])),
        vec![Arc::new(Int64Array::from(vec![1]))],
    )
    .unwrap();
    let append = |files| {
        let transaction = Transaction::new(&base);
        transaction
            .fast_append()
            .add_data_files(files)
            .apply(transaction)
            .unwrap()
    };
    let mut files = Vec::new();
    for _ in 0..3 {
        files.push(
            floe_sql::write::write_batch_files(&base, &batch)
                .await
                .unwrap(),
        );
    }
    // Another writer commits first.
    floe_sql::write::commit_transaction(&access, append(files.pop().unwrap()))
        .await
        .unwrap();
    // Built on the state before it: pinned, the commit conflicts ...
    let err = floe_sql::write::commit_transaction_on(&access, &base, append(files.pop().unwrap()))
        .await
        .unwrap_err();
    assert!(err.to_string().to_lowercase().contains("conflict"), "{err}");
    // ... where iceberg's own commit re-applies it to the newer state.
    floe_sql::write::commit_transaction(&access, append(files.pop().unwrap()))
        .await
        .unwrap();
    assert_eq!(
        rows_of(&mut floe, "SELECT count(*) FROM p.t").await,
        vec![vec!["2".to_string()]]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inner_joins_start_from_the_selective_dimensions() {
    let mut floe = fresh().await;
    run_all(
        &mut floe,
        &[
            "CREATE SCHEMA jo",
            "CREATE TABLE jo.region (rk BIGINT, name VARCHAR)",
            "INSERT INTO jo.region VALUES (0, 'R0'), (1, 'R1'), (2, 'R2'), (3, 'R3'), (4, 'R4')",
            "CREATE TABLE jo.nation (nk BIGINT, rk BIGINT, name VARCHAR)",
            "INSERT INTO jo.nation SELECT value, value % 5, concat('N', value) \
             FROM generate_series(0, 24) AS t(value)",
            "CREATE TABLE jo.supp (sk BIGINT, nk BIGINT)",
            "INSERT INTO jo.supp SELECT value, value % 25 FROM generate_series(1, 500) AS t(value)",
            "CREATE TABLE jo.cust (ck BIGINT, nk BIGINT)",
            "INSERT INTO jo.cust SELECT value, (value * value + value / 7) % 25 \
             FROM generate_series(1, 5000) AS t(value)",
            "CREATE TABLE jo.ord (ok BIGINT, ck BIGINT, day BIGINT)",
            "INSERT INTO jo.ord SELECT value, value % 5000 + 1, value % 365 \
             FROM generate_series(1, 20000) AS t(value)",
            "CREATE TABLE jo.item (ok BIGINT, sk BIGINT, price BIGINT)",
            "INSERT INTO jo.item SELECT value % 20000 + 1, (value * 37) % 500 + 1, value % 97 \
             FROM generate_series(1, 60000) AS t(value)",
        ],
    )
    .await;
    // Named item-first, as a query writer might; the region's one in five suppliers should
    // cut `item` before it meets the orders and the customers.
    let query = "SELECT n.name, sum(i.price), count(*) \
                 FROM jo.item i, jo.ord o, jo.cust c, jo.supp s, jo.nation n, jo.region r \
                 WHERE c.ck = o.ck AND i.ok = o.ok AND i.sk = s.sk AND c.nk = s.nk \
                 AND s.nk = n.nk AND n.rk = r.rk AND r.name = 'R2' AND o.day < 100 \
                 GROUP BY n.name ORDER BY n.name";
    // The logical plan's scans, in join order (the physical plan names none this way).
    let plans = plan_text(&floe, &format!("EXPLAIN {query}")).await;
    let scans: Vec<&str> = plans
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("TableScan: jo."))
        .map(|l| l.split(' ').next().unwrap_or(l))
        .collect();
    assert_eq!(
        scans,
        ["region", "nation", "supp", "item", "ord", "cust"],
        "{plans}"
    );

    // The answer, worked out here from the rows' formulas.
    let mut expected: std::collections::BTreeMap<String, (i64, i64)> = Default::default();
    for v in 1..=60_000i64 {
        let (ok, sk, price) = (v % 20_000 + 1, (v * 37) % 500 + 1, v % 97);
        let (ck, day) = (ok % 5_000 + 1, ok % 365);
        let customer_nation = (ck * ck + ck / 7) % 25;
        let supplier_nation = sk % 25;
        if customer_nation == supplier_nation && supplier_nation % 5 == 2 && day < 100 {
            let entry = expected.entry(format!("N{supplier_nation}")).or_default();
            entry.0 += price;
            entry.1 += 1;
        }
    }
    let expected: Vec<Vec<String>> = expected
        .into_iter()
        .map(|(name, (sum, count))| vec![name, sum.to_string(), count.to_string()])
        .collect();
    assert!(!expected.is_empty());
    assert_eq!(rows_of(&mut floe, query).await, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_condition_over_two_dimensions_is_kept_out_of_a_nested_loop_join() {
    let mut floe = fresh().await;
    run_all(
        &mut floe,
        &[
            "CREATE SCHEMA kl",
            "CREATE TABLE kl.nation (nk BIGINT, name VARCHAR)",
            "INSERT INTO kl.nation SELECT value, concat('N', value) \
             FROM generate_series(0, 24) AS t(value)",
            "CREATE TABLE kl.supp (sk BIGINT, nk BIGINT)",
            "INSERT INTO kl.supp SELECT value, value % 25 FROM generate_series(1, 500) AS t(value)",
            "CREATE TABLE kl.cust (ck BIGINT, nk BIGINT)",
            "INSERT INTO kl.cust SELECT value, (value * 7) % 25 FROM generate_series(1, 2000) AS t(value)",
            "CREATE TABLE kl.ord (ok BIGINT, ck BIGINT)",
            "INSERT INTO kl.ord SELECT value, value % 2000 + 1 FROM generate_series(1, 10000) AS t(value)",
            "CREATE TABLE kl.item (ok BIGINT, sk BIGINT, price BIGINT)",
            "INSERT INTO kl.item SELECT value % 10000 + 1, (value * 37) % 499 + 1, value % 97 \
             FROM generate_series(1, 40000) AS t(value)",
        ],
    )
    .await;
    // TPC-H Q7's shape: the two nations are tied only by the `OR` of their names. Joined to
    // each other first, they make a nested-loop join whose output size DataFusion does not
    // know, and every hash join above it is then planned blind.
    let query = "SELECT n1.name, n2.name, sum(i.price), count(*) \
                 FROM kl.supp s, kl.item i, kl.ord o, kl.cust c, kl.nation n1, kl.nation n2 \
                 WHERE s.sk = i.sk AND o.ok = i.ok AND c.ck = o.ck \
                 AND s.nk = n1.nk AND c.nk = n2.nk AND i.price < 90 \
                 AND ((n1.name = 'N3' AND n2.name = 'N7') OR (n1.name = 'N7' AND n2.name = 'N3')) \
                 GROUP BY n1.name, n2.name ORDER BY n1.name, n2.name";
    let plan = plan_text(&floe, &format!("EXPLAIN {query}")).await;
    assert!(!plan.contains("NestedLoopJoinExec"), "{plan}");
    assert!(!plan.contains("Cross Join"), "{plan}");
    // The keys of both joins `item` meets reach its scan as one filter, so its rows are
    // copied once.
    let item_filter = plan
        .lines()
        .position(|l| l.contains("DataSourceExec") && l.contains("projection=[ok, sk, price]"))
        .and_then(|scan| plan.lines().nth(scan.checked_sub(1)?))
        .unwrap_or_else(|| panic!("no item scan:\n{plan}"));
    assert!(
        item_filter
            .trim_start()
            .starts_with("FilterExec: RuntimeFilter(DynamicFilter [ empty ]) AND RuntimeFilter("),
        "{plan}"
    );

    // The answer, worked out here from the rows' formulas.
    let mut expected: std::collections::BTreeMap<(i64, i64), (i64, i64)> = Default::default();
    for v in 1..=40_000i64 {
        let (ok, sk, price) = (v % 10_000 + 1, (v * 37) % 499 + 1, v % 97);
        let ck = ok % 2_000 + 1;
        let (supplier_nation, customer_nation) = (sk % 25, (ck * 7) % 25);
        if price < 90 && matches!((supplier_nation, customer_nation), (3, 7) | (7, 3)) {
            let entry = expected
                .entry((supplier_nation, customer_nation))
                .or_default();
            entry.0 += price;
            entry.1 += 1;
        }
    }
    let mut expected: Vec<Vec<String>> = expected
        .into_iter()
        .map(|((s, c), (sum, count))| {
            vec![
                format!("N{s}"),
                format!("N{c}"),
                sum.to_string(),
                count.to_string(),
            ]
        })
        .collect();
    expected.sort();
    assert_eq!(expected.len(), 2);
    assert_eq!(rows_of(&mut floe, query).await, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_in_over_columns_without_nulls_builds_on_the_subquery() {
    let mut floe = fresh().await;
    run_all(
        &mut floe,
        &[
            "CREATE SCHEMA ni",
            "CREATE TABLE ni.outer_rows (k BIGINT)",
            "INSERT INTO ni.outer_rows SELECT value FROM generate_series(1, 5000) AS t(value)",
            "CREATE TABLE ni.few (k BIGINT)",
            "INSERT INTO ni.few VALUES (2), (4), (4000)",
        ],
    )
    .await;
    let query = "SELECT count(*) FROM ni.outer_rows WHERE k NOT IN (SELECT k FROM ni.few)";
    let plan = analyzed(&floe, query).await;
    // A plain anti join, swapped so the three subquery rows are its build side; null-aware it
    // could not be swapped and would build all 5,000 outer rows.
    let join = plan
        .lines()
        .find(|l| l.trim_start().starts_with("HashJoinExec"))
        .unwrap_or_else(|| panic!("no hash join:\n{plan}"));
    assert!(join.contains("join_type=RightAnti"), "{join}");
    assert!(join.contains("build_input_rows=3,"), "{join}");
    assert_eq!(
        rows_of(&mut floe, query).await,
        vec![vec!["4997".to_string()]]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_bounded_by_a_grouped_subquery_is_broadcast_and_prefilters_its_probe() {
    let mut floe = fresh().await;
    run_all(
        &mut floe,
        &[
            "CREATE SCHEMA bb",
            "CREATE TABLE bb.part (k BIGINT, brand VARCHAR)",
            "INSERT INTO bb.part SELECT value, CASE WHEN value % 100 = 7 THEN 'b1' ELSE 'other' END \
             FROM generate_series(1, 20000) AS t(value)",
            "CREATE TABLE bb.item (k BIGINT, q BIGINT)",
            "INSERT INTO bb.item SELECT value % 20000 + 1, value % 53 \
             FROM generate_series(0, 399999) AS t(value)",
        ],
    )
    .await;
    // TPC-H Q17's plan: the 200 parts of one brand joined with the average per part, then
    // with the items.
    let sql = "SELECT sum(i.q) FROM bb.item i JOIN (SELECT p.k, a.avg_q FROM bb.part p \
               JOIN (SELECT k, avg(q) AS avg_q FROM bb.item GROUP BY k) a ON a.k = p.k \
               WHERE p.brand = 'b1') pa ON i.k = pa.k WHERE i.q < pa.avg_q";
    let plan = analyzed(&floe, sql).await;
    // The outer join builds on the 200 parts joined with their averages (at most one row per
    // part), not on 400,000 repartitioned item rows.
    let outer = plan
        .lines()
        .find(|l| l.trim_start().starts_with("HashJoinExec"))
        .unwrap_or_else(|| panic!("no hash join:\n{plan}"));
    assert!(outer.contains("mode=CollectLeft"), "{outer}\n{plan}");
    assert!(
        !plan.contains("RepartitionExec: partitioning=Hash([k@0], 2), input_partitions=2, metrics=[output_rows=400000"),
        "{plan}"
    );
    // Both item scans are cut to the 200 parts' 4,000 rows by a bitmap of their keys, the
    // outer one before the join probes them.
    let filtered: Vec<&str> = plan
        .lines()
        .filter(|l| l.trim_start().starts_with("FilterExec: RuntimeFilter"))
        .collect();
    assert_eq!(filtered.len(), 2, "{plan}");
    for line in filtered {
        assert!(line.contains("IN (SET)"), "{line}");
        assert!(line.contains("output_rows=4.00 K,"), "{line}");
    }
    // The answer, worked out here: part k's items are the values k - 1 + 20000 j.
    let mut expected = 0i64;
    for k in (1..=20000i64).filter(|k| k % 100 == 7) {
        let qs: Vec<i64> = (0..20).map(|j| (k - 1 + 20000 * j) % 53).collect();
        let avg = qs.iter().sum::<i64>() as f64 / qs.len() as f64;
        expected += qs.iter().filter(|&&q| (q as f64) < avg).sum::<i64>();
    }
    assert_eq!(
        rows_of(&mut floe, sql).await,
        vec![vec![expected.to_string()]]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_written_in_the_tables_sort_order_are_read_in_that_order() {
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use floe_catalog::service::CreateTable;
    use iceberg::NamespaceIdent;
    use iceberg::spec::{NullOrder, SortDirection, SortField, SortOrder, Transform};

    let mut floe = fresh().await;
    floe.run("CREATE SCHEMA so").await.unwrap();
    let schema = floe_sql::write::iceberg_schema(&Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Int64, false),
    ]))
    .unwrap();
    let k = schema.field_by_name("k").unwrap().id;
    let order = SortOrder::builder()
        .with_order_id(1)
        .with_sort_field(
            SortField::builder()
                .source_id(k)
                .transform(Transform::Identity)
                .direction(SortDirection::Ascending)
                .null_order(NullOrder::First)
                .build(),
        )
        .build(&schema)
        .unwrap();
    for name in ["sorted", "mixed"] {
        let table = CreateTable {
            name: name.into(),
            location: None,
            schema: schema.clone(),
            partition_spec: None,
            write_order: Some(order.clone()),
            stage_create: false,
            properties: Default::default(),
        };
        floe.engine
            .catalog()
            .create_table(
                &Caller::system(),
                "default",
                &NamespaceIdent::new("so".into()),
                table,
            )
            .await
            .unwrap();
    }
    run_all(
        &mut floe,
        &[
            // Two appends in key order, the second starting at the key the first ended with.
            "INSERT INTO so.sorted SELECT value, value % 7 FROM generate_series(1, 50000) AS t(value) ORDER BY 1",
            "INSERT INTO so.sorted SELECT value, value % 7 FROM generate_series(50000, 100000) AS t(value) ORDER BY 1",
            // The same keys out of order.
            "INSERT INTO so.mixed SELECT (value * 7919) % 100001, value % 7 FROM generate_series(1, 100000) AS t(value)",
        ],
    )
    .await;
    // The writer found the rows in order and said so on the files; out of order, it did not.
    assert_eq!(
        rows_of(&mut floe, r#"SELECT sort_order_id FROM so."sorted$files""#).await,
        vec![vec!["1".to_string()], vec!["1".to_string()]]
    );
    assert_eq!(
        rows_of(&mut floe, r#"SELECT sort_order_id FROM so."mixed$files""#).await,
        vec![vec!["NULL".to_string()]]
    );
    // The scan declares the order, and the aggregation by the key streams over it.
    let query = "SELECT k, sum(v) AS s FROM so.sorted GROUP BY k";
    let plan = plan_text(&floe, &format!("EXPLAIN {query}")).await;
    assert!(plan.contains("output_ordering=[k@0 ASC]"), "{plan}");
    assert!(plan.contains("ordering_mode=Sorted"), "{plan}");
    let plan = plan_text(&floe, "EXPLAIN SELECT k, sum(v) FROM so.mixed GROUP BY k").await;
    assert!(!plan.contains("output_ordering"), "{plan}");
    assert!(!plan.contains("ordering_mode"), "{plan}");
    // Key 50,000 is in both files and still one group.
    assert_eq!(
        rows_of(
            &mut floe,
            &format!("SELECT count(*), sum(s), max(s) FROM ({query}) AS g")
        )
        .await,
        vec![vec![
            "100000".to_string(),
            ((1..=100_000i64).map(|v| v % 7).sum::<i64>() + 50_000 % 7).to_string(),
            // Its two rows' sum (12) tops every one-row group's (at most 6).
            (2 * (50_000 % 7)).to_string(),
        ]]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_build_grouped_by_its_key_is_joined_and_grouped_per_partition() {
    let mut floe = fresh().await;
    run_all(
        &mut floe,
        &[
            "CREATE SCHEMA pg",
            "CREATE TABLE pg.customer (k BIGINT)",
            "INSERT INTO pg.customer SELECT value FROM generate_series(1, 140000) AS t(value)",
            "CREATE TABLE pg.orders (id BIGINT, ck BIGINT)",
            "INSERT INTO pg.orders SELECT value, (value * 7) % 150000 + 1 \
             FROM generate_series(0, 299999) AS t(value)",
        ],
    )
    .await;
    // TPC-H Q13's shape: every customer with its number of orders, customers per number.
    let sql = "SELECT n, count(*) FROM (SELECT c.k, count(o.id) AS n FROM pg.customer c \
               LEFT JOIN pg.orders o ON c.k = o.ck GROUP BY c.k) AS per GROUP BY n ORDER BY n";
    let plan = analyzed(&floe, sql).await;
    // 140,000 customers are more than DataFusion collects: the join is partitioned by the key
    // and the grouping by that key needs no partial step and no repartition of its own.
    let join = plan
        .lines()
        .find(|l| l.trim_start().starts_with("HashJoinExec"))
        .unwrap_or_else(|| panic!("no hash join:\n{plan}"));
    assert!(join.contains("mode=Partitioned"), "{join}\n{plan}");
    assert!(
        plan.lines()
            .any(|l| l.contains("AggregateExec: mode=SinglePartitioned, gby=[k@0 as k]")),
        "{plan}"
    );
    let mut orders = vec![0i64; 150_001];
    for v in 0..300_000i64 {
        orders[((v * 7) % 150_000 + 1) as usize] += 1;
    }
    let mut per_count: std::collections::BTreeMap<i64, i64> = Default::default();
    for n in &orders[1..=140_000] {
        *per_count.entry(*n).or_default() += 1;
    }
    let expected: Vec<Vec<String>> = per_count
        .into_iter()
        .map(|(n, customers)| vec![n.to_string(), customers.to_string()])
        .collect();
    assert_eq!(rows_of(&mut floe, sql).await, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grouping_sets_combine_a_plain_aggregation_by_every_key() {
    let mut floe = fresh().await;
    run_all(
        &mut floe,
        &[
            "CREATE SCHEMA ps",
            "CREATE TABLE ps.inv (item BIGINT, qty INT)",
            "INSERT INTO ps.inv SELECT value % 50, value % 7 FROM generate_series(1, 100000) AS t(value)",
        ],
    )
    .await;
    // TPC-DS Q22's shape: a rollup over few groups of many rows.
    let sql = "SELECT item % 5 AS a, item AS b, avg(qty), count(*) FROM ps.inv \
               GROUP BY ROLLUP (item % 5, item) ORDER BY a NULLS FIRST, b NULLS FIRST LIMIT 3";
    let plan = analyzed(&floe, sql).await;
    // The sets combine states of 50 groups, not 100,000 rows three times each.
    assert!(
        plan.lines()
            .any(|l| l.contains("PreaggregatedSetsExec: AggregateExec: mode=PartialReduce")),
        "no combining aggregation:\n{plan}"
    );
    assert!(
        plan.lines().any(|l| l
            .contains("mode=Partial, gby=[item@0 % 5 as ps.inv.item % Int64(5), item@0 as item]")),
        "{plan}"
    );
    assert_eq!(
        rows_of(&mut floe, sql).await,
        vec![
            vec!["NULL", "NULL", "3.0", "100000"],
            vec!["0", "NULL", "3.0001", "20000"],
            vec!["0", "0", "3.0", "2000"],
        ]
        .into_iter()
        .map(|r| r.into_iter().map(String::from).collect::<Vec<_>>())
        .collect::<Vec<_>>()
    );
}
