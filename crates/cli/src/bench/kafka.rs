//! `floe bench ingest --kafka`: a Kafka pipeline in this process, reading librdkafka's mock
//! cluster (the Kafka protocol over loopback TCP) into an embedded catalog under `--dir`.
//!
//! 1. Throughput: `--kafka-records` events (the HTTP benchmark's ~150-byte JSON rows) are
//!    produced first; the pipeline then catches up. Records/s and MiB/s are over the catch-up
//!    wall time and over the CPU seconds this process used meanwhile (per core).
//! 2. Freshness: with the pipeline running at a 1 s commit interval, single records are
//!    produced and timed until a query sees them.
//! 3. Files per partition per commit, from the table's snapshots.
//! 4. Peak resident memory with a topic of `--kafka-wide-partitions` partitions all active,
//!    writing into a table of 1,000 partitions (`bucket(1000, id)`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use floe_catalog::governance::authz::Caller;
use floe_sql::{QueryOptions, SqlEngine};
use floe_stream::kafka::{Pipeline, PipelineSpec, StartPosition};
use futures::TryStreamExt;
use iceberg::NamespaceIdent;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use tokio_util::sync::CancellationToken;

use super::process::{cpu_seconds, memory_mib, reset_peak_memory};

pub struct KafkaBench {
    pub dir: PathBuf,
    pub records: usize,
    pub partitions: i32,
    pub wide_partitions: i32,
    pub probes: usize,
}

async fn embedded(dir: &Path) -> anyhow::Result<Arc<SqlEngine>> {
    let engine = super::embedded_engine(dir).await?;
    engine
        .catalog()
        .create_namespace(
            &Caller::system(),
            "bench",
            &NamespaceIdent::new("kafka".into()),
            Default::default(),
        )
        .await?;
    Ok(Arc::new(engine))
}

/// Produces `count` events from id `first`, round-robin over `partitions`; returns bytes.
fn produce(
    bootstrap: &str,
    topic: &str,
    first: u64,
    count: usize,
    partitions: i32,
) -> anyhow::Result<u64> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "20")
        .set("queue.buffering.max.messages", "1000000")
        .create()?;
    let mut bytes = 0u64;
    for chunk_start in (0..count).step_by(10_000) {
        let n = 10_000.min(count - chunk_start);
        let body = super::ingest::events(first + chunk_start as u64, n);
        for (i, line) in body
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .enumerate()
        {
            let partition = ((chunk_start + i) % partitions as usize) as i32;
            bytes += line.len() as u64;
            loop {
                match producer.send(
                    BaseRecord::<(), [u8]>::to(topic)
                        .payload(line)
                        .partition(partition),
                ) {
                    Ok(()) => break,
                    Err((_, _)) => {
                        producer.poll(Duration::from_millis(10));
                    }
                }
            }
        }
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(120))?;
    Ok(bytes)
}

async fn count(engine: &SqlEngine, table: &str) -> u64 {
    let options = QueryOptions {
        warehouse: Some("bench".into()),
        ..Default::default()
    };
    let sql = format!("SELECT count(*) FROM kafka.{table}");
    let Ok(result) = engine.query(&Caller::system(), &sql, &options).await else {
        return 0;
    };
    let Ok(batches) = result
        .stream
        .try_collect::<Vec<datafusion::arrow::array::RecordBatch>>()
        .await
    else {
        return 0;
    };
    batches
        .first()
        .and_then(|b| {
            b.column(0)
                .as_any()
                .downcast_ref::<datafusion::arrow::array::Int64Array>()
                .map(|a| a.value(0) as u64)
        })
        .unwrap_or(0)
}

fn spec(bootstrap: &str, table: &str, topic: &str) -> PipelineSpec {
    PipelineSpec {
        name: table.into(),
        warehouse: "bench".into(),
        namespace: vec!["kafka".into()],
        table: table.into(),
        bootstrap_servers: bootstrap.into(),
        topics: vec![topic.into()],
        start: StartPosition::Earliest,
        properties: Default::default(),
        commit_interval_ms: 1000,
        max_records: 100_000,
        ..Default::default()
    }
}

pub async fn run(args: KafkaBench) -> anyhow::Result<()> {
    if args.dir.exists() {
        std::fs::remove_dir_all(&args.dir)?;
    }
    std::fs::create_dir_all(&args.dir)?;
    let engine = embedded(&args.dir).await?;
    let cluster = rdkafka::mocking::MockCluster::new(1)?;
    cluster.create_topic("events", args.partitions, 1)?;
    cluster.create_topic("wide", args.wide_partitions, 1)?;
    let bootstrap = cluster.bootstrap_servers();

    // 1. Throughput: catch up with a produced backlog.
    let started = Instant::now();
    let bytes = {
        let bootstrap = bootstrap.clone();
        let (records, partitions) = (args.records, args.partitions);
        tokio::task::spawn_blocking(move || produce(&bootstrap, "events", 0, records, partitions))
            .await??
    };
    println!(
        "produced {} records ({:.1} MiB) in {:.1} s",
        args.records,
        bytes as f64 / 1048576.0,
        started.elapsed().as_secs_f64()
    );
    let on_broker: i64 = {
        let spec = spec(&bootstrap, "events", "events");
        tokio::task::spawn_blocking(move || {
            floe_stream::kafka::lag(&spec, &Default::default())
                .map(|l| l.iter().map(|p| p.lag).sum::<i64>())
        })
        .await??
    };
    // librdkafka's mock cluster keeps at most 5 MiB or 100,000 records per partition.
    anyhow::ensure!(
        on_broker == args.records as i64,
        "the mock broker kept {on_broker} of {} records (it keeps at most 5 MiB or 100,000 \
         records per partition): use more partitions or fewer records",
        args.records
    );
    let pipeline = Arc::new(Pipeline::new(
        spec(&bootstrap, "events", "events"),
        engine.catalog().clone(),
        engine.clone(),
    )?);
    let stop = CancellationToken::new();
    let cpu_before = cpu_seconds().unwrap_or(0.0);
    let wall = Instant::now();
    let running = {
        let (pipeline, stop) = (pipeline.clone(), stop.clone());
        tokio::spawn(async move { pipeline.run(stop).await })
    };
    let mut shown = Instant::now();
    let mut last_progress = 0;
    while pipeline.stats().records_committed < args.records as u64 {
        anyhow::ensure!(!running.is_finished(), "the pipeline stopped early");
        if shown.elapsed() > Duration::from_secs(30) {
            anyhow::bail!(
                "the pipeline made no progress for 30 s at {:?}",
                pipeline.stats()
            );
        }
        if pipeline.stats().records_committed > last_progress {
            last_progress = pipeline.stats().records_committed;
            shown = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let wall = wall.elapsed().as_secs_f64();
    let cpu = cpu_seconds().unwrap_or(0.0) - cpu_before;
    let stats = pipeline.stats();
    anyhow::ensure!(
        count(&engine, "events").await == args.records as u64,
        "the table does not hold exactly the produced records"
    );
    let mib = stats.bytes_committed as f64 / 1048576.0;

    // 2. Freshness: single records, each timed until a query sees it.
    let mut freshness = Vec::with_capacity(args.probes);
    for probe in 0..args.probes {
        let before = count(&engine, "events").await;
        let sent = Instant::now();
        let bootstrap = bootstrap.clone();
        let first = (args.records + probe) as u64;
        tokio::task::spawn_blocking(move || produce(&bootstrap, "events", first, 1, 1)).await??;
        while count(&engine, "events").await <= before {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        freshness.push(sent.elapsed().as_secs_f64() * 1000.0);
    }
    stop.cancel();
    running.await??;
    freshness.sort_by(f64::total_cmp);
    let pct = |p: f64| freshness[((freshness.len() as f64 * p) as usize).min(freshness.len() - 1)];

    // 3. Files per commit.
    let loaded = engine
        .catalog()
        .load_table(
            &Caller::system(),
            "bench",
            &iceberg::TableIdent::new(NamespaceIdent::new("kafka".into()), "events".into()),
        )
        .await?;
    let snapshots = loaded.metadata.snapshots().count();
    let files: u64 = loaded
        .metadata
        .current_snapshot()
        .and_then(|s| {
            s.summary()
                .additional_properties
                .get("total-data-files")
                .cloned()
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);

    // 4. Memory with every partition of a wide topic active.
    let wide_records = (args.wide_partitions as usize * 200).max(100_000);
    {
        let bootstrap = bootstrap.clone();
        let partitions = args.wide_partitions;
        tokio::task::spawn_blocking(move || {
            produce(&bootstrap, "wide", 0, wide_records, partitions)
        })
        .await??;
    }
    reset_peak_memory();
    let resident_before = memory_mib("VmRSS:").unwrap_or(0.0);
    // Every Kafka partition active, and every record bound for one of 1,000 table
    // partitions: 1,000 open writers per commit.
    let wide_spec = PipelineSpec {
        partition_by: vec!["bucket(1000, id)".into()],
        ..spec(&bootstrap, "wide", "wide")
    };
    let wide = Arc::new(Pipeline::new(
        wide_spec,
        engine.catalog().clone(),
        engine.clone(),
    )?);
    let stop = CancellationToken::new();
    let running = {
        let (wide, stop) = (wide.clone(), stop.clone());
        tokio::spawn(async move { wide.run(stop).await })
    };
    let deadline = Instant::now() + Duration::from_secs(600);
    while wide.stats().records_committed < wide_records as u64 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.cancel();
    running.await??;
    let peak = memory_mib("VmHWM:").unwrap_or(0.0);
    let wide_stats = wide.stats();
    let wide_files_per_partition_commit =
        wide_stats.files_written as f64 / (1000.0 * wide_stats.commits.max(1) as f64);

    println!();
    println!(
        "Kafka → Iceberg, {} partitions, JSON, 1 s commit interval",
        args.partitions
    );
    println!(
        "  catch-up: {} records, {mib:.1} MiB in {wall:.2} s wall, {cpu:.2} CPU s",
        stats.records_committed
    );
    println!(
        "  throughput: {:.0} records/s, {:.1} MiB/s wall; {:.1} MiB/s per core ({:.0} records/s per core)",
        stats.records_committed as f64 / wall,
        mib / wall,
        mib / cpu.max(1e-9),
        stats.records_committed as f64 / cpu.max(1e-9)
    );
    println!(
        "  freshness (produce → visible), {} probes: p50 {:.0} ms, p99 {:.0} ms",
        freshness.len(),
        pct(0.5),
        pct(0.99)
    );
    println!(
        "  files: {files} data files over {snapshots} snapshots (unpartitioned table: files per partition per commit = {:.2})",
        files as f64 / snapshots.max(1) as f64
    );
    println!(
        "  files per table partition per hour at a steady stream and a 1 s interval: at most {:.0} before compaction (one per partition per commit)",
        3600.0 * (files as f64 / snapshots.max(1) as f64).min(1.0)
    );
    println!(
        "  {} Kafka partitions active into 1,000 table partitions (bucket(1000, id)), {} records: peak resident {peak:.0} MiB, {:.0} MiB above the {resident_before:.0} MiB before; {} commits, {:.2} files per table partition per commit",
        args.wide_partitions,
        wide_records,
        peak - resident_before,
        wide_stats.commits,
        wide_files_per_partition_commit
    );
    Ok(())
}
