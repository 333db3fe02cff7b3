//! A hash join's build-side keys collected as a bitmap while the join reads them.
//!
//! A join whose build side holds more distinct keys than DataFusion's `IN`-list limit
//! publishes its runtime filter as a lookup in the join's hash table, which keeps hashes and
//! row positions but not the key values: testing a probe row costs a hash and a probe of a
//! table that may be far larger than the caches (52 ns a row over TPC-H Q9's `lineitem` at
//! SF10, against its 108,800 `part` keys). Integer keys, like most join keys, mostly come from
//! a dense range. [`CollectKeysExec`] sits on a join's build side and sets one bit per key in
//! a [`Bitmap`] as the batches pass; once every build partition has ended it offers the
//! bitmap ([`BuildKeys::keys`]), which runtime filters test instead of the join's own
//! filter: a compare and a bit test per row. Keys too sparse for a bitmap of their span but
//! few (a selective join's) are offered as a small hash set instead.
//!
//! Keys are collected for a hash join with one key, nulls equal to nothing and not null-aware,
//! whose build-side key is a signed integer, an unsigned one of up to 32 bits or a date, and
//! only when a runtime filter under the join's probe side reads the join's filter on a column
//! of such a type ([`super`]). Keys spanning more than [`MAX_BITS`], many keys too sparse for
//! their span, or a memory budget that cannot hold the bitmap leave the join's own filter in
//! place.
//!
//! Why the test cannot differ from the join's filter: every key converts to `i64` without
//! loss, and the set holds exactly the non-null keys of every build partition (a null key
//! joins nothing; a null probe value fails). For a partitioned join a row's key can only be
//! in its own partition's set, which the union holds too, so the union drops no row the
//! routed filter keeps. The keys are offered only once as many build partitions have ended as
//! the build side has: a partition that fails, is dropped (a query stopped early) or never
//! runs leaves them unoffered and the join's own filter in place. A plan run again (a
//! recursive query's next round) forgets them first ([`ExecutionPlan::reset_state`]).
//! Ended partitions are named, not counted: a build partition that ends twice (run again for
//! any reason) abandons the keys rather than completing them before another has ended.

use std::fmt;
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::compute::{cast, max, min};
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryPool, MemoryReservation};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use futures::StreamExt;

use super::key_set::{Bitmap, Keys};

/// The widest bitmap collected, in bits (8 MiB): TPC-H's order keys at SF10 span 60 million.
const MAX_BITS: u64 = 1 << 26;

/// Whether keys of `data_type` can be collected as integers.
pub(crate) fn collectable(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::Date32
    )
}

/// One join's build-side keys, collected by its [`CollectKeysExec`] and read by the runtime
/// filters of the scans its filter was pushed into.
#[derive(Debug)]
pub(crate) struct BuildKeys {
    /// The join's build-side key, over the build side's rows.
    key: Arc<dyn PhysicalExpr>,
    /// Build partitions that must end before the keys are complete.
    partitions: usize,
    collecting: Mutex<Collecting>,
    /// Set once every partition has ended, when the keys are worth testing.
    complete: Mutex<Option<Arc<Keys>>>,
}

#[derive(Debug, Default)]
struct Collecting {
    bitmap: Bitmap,
    /// The build partitions that have ended, by index.
    ended: std::collections::BTreeSet<usize>,
    /// The keys spread too wide, or the memory budget ran out: nothing is offered.
    abandoned: bool,
    reservation: Option<MemoryReservation>,
}

impl BuildKeys {
    pub(crate) fn new(key: Arc<dyn PhysicalExpr>, partitions: usize) -> Self {
        Self {
            key,
            partitions,
            collecting: Mutex::default(),
            complete: Mutex::default(),
        }
    }

    /// The build side's keys once all of them were seen, when they are worth testing.
    pub(crate) fn keys(&self) -> Option<Arc<Keys>> {
        self.complete.lock().expect("build keys lock").clone()
    }

    /// Forgets the keys of an execution, before the plan runs again (a recursive query's
    /// next round).
    fn reset(&self) {
        *self.collecting.lock().expect("build keys lock") = Collecting::default();
        *self.complete.lock().expect("build keys lock") = None;
    }

    /// Sets the bits of `batch`'s keys.
    fn add(&self, batch: &RecordBatch, pool: &Arc<dyn MemoryPool>) -> Result<()> {
        if self.collecting.lock().expect("build keys lock").abandoned {
            return Ok(());
        }
        let keys = self.key.evaluate(batch)?.into_array(batch.num_rows())?;
        let Ok(keys) = cast(&keys, &DataType::Int64) else {
            // Keys that are not integers after all: the join's own filter stays.
            self.collecting.lock().expect("build keys lock").abandon();
            return Ok(());
        };
        let keys = keys.as_primitive::<Int64Type>();
        let (Some(low), Some(high)) = (min(keys), max(keys)) else {
            // No rows, or only null keys (which join nothing).
            return Ok(());
        };
        let mut collecting = self.collecting.lock().expect("build keys lock");
        let collecting = &mut *collecting;
        if collecting.abandoned {
            return Ok(());
        }
        if !collecting.bitmap.cover(low, high, MAX_BITS) {
            collecting.abandon();
            return Ok(());
        }
        let reservation = collecting
            .reservation
            .get_or_insert_with(|| MemoryConsumer::new("CollectKeysExec").register(pool));
        if reservation.try_resize(collecting.bitmap.size()).is_err() {
            collecting.abandon();
            return Ok(());
        }
        match keys.nulls() {
            None => keys
                .values()
                .iter()
                .for_each(|&k| collecting.bitmap.insert(k)),
            Some(nulls) => keys
                .values()
                .iter()
                .zip(nulls.iter())
                .filter(|(_, valid)| *valid)
                .for_each(|(&k, _)| collecting.bitmap.insert(k)),
        }
        Ok(())
    }

    /// Notes that one build partition has ended; the last one completes the keys.
    fn end(&self, partition: usize) {
        let mut collecting = self.collecting.lock().expect("build keys lock");
        if !collecting.ended.insert(partition) {
            // Ended before: its keys may have been added twice over a changed input, and the
            // count of partitions no longer says when all have run.
            collecting.abandon();
        }
        if collecting.ended.len() < self.partitions {
            return;
        }
        let bitmap = std::mem::take(&mut collecting.bitmap);
        let offered = (!collecting.abandoned)
            .then(|| bitmap.into_keys())
            .flatten()
            .map(Arc::new);
        match &offered {
            // A hash set is chosen only where it is smaller than the bitmap was.
            Some(keys) => {
                if let Some(reservation) = &mut collecting.reservation {
                    reservation.resize(keys.size());
                }
            }
            None => collecting.reservation = None,
        }
        *self.complete.lock().expect("build keys lock") = offered;
    }
}

impl Collecting {
    fn abandon(&mut self) {
        self.abandoned = true;
        self.bitmap = Bitmap::default();
        self.reservation = None;
    }
}

/// Passes a hash join's build side on unchanged, collecting its keys into [`BuildKeys`].
#[derive(Debug)]
pub(crate) struct CollectKeysExec {
    input: Arc<dyn ExecutionPlan>,
    keys: Arc<BuildKeys>,
}

impl CollectKeysExec {
    pub(crate) fn new(input: Arc<dyn ExecutionPlan>, keys: Arc<BuildKeys>) -> Self {
        Self { input, keys }
    }
}

impl DisplayAs for CollectKeysExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "CollectKeysExec: key={}", self.keys.key)?;
        if let Some(keys) = self.keys.keys() {
            write!(f, ", collected={} ({} bytes)", keys.kind(), keys.size())?;
        }
        Ok(())
    }
}

impl ExecutionPlan for CollectKeysExec {
    fn name(&self) -> &str {
        "CollectKeysExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        // Rows pass unchanged: partitioning, order and equivalences stay the input's.
        self.input.properties()
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = children
            .pop()
            .ok_or_else(|| DataFusionError::Internal("CollectKeysExec takes one child".into()))?;
        Ok(Arc::new(Self {
            input,
            keys: self.keys.clone(),
        }))
    }

    fn reset_state(self: Arc<Self>) -> Result<Arc<dyn ExecutionPlan>> {
        self.keys.reset();
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input = self.input.execute(partition, context.clone())?;
        let schema = input.schema();
        let (keys, ending) = (self.keys.clone(), self.keys.clone());
        let pool = context.memory_pool().clone();
        let batches = input
            .map(move |batch| {
                let batch = batch?;
                keys.add(&batch, &pool)?;
                Ok(batch)
            })
            // Runs only when the input has ended (not after an error: the query stops).
            .chain(
                futures::stream::once(async move { ending.end(partition) })
                    .filter_map(|()| async { None::<Result<RecordBatch>> }),
            );
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, batches)))
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Int32Array, Int64Array};
    use datafusion::arrow::datatypes::{Field, Schema};
    use datafusion::execution::memory_pool::{GreedyMemoryPool, UnboundedMemoryPool};
    use datafusion::physical_expr::expressions::Column;

    use super::*;

    fn batch_of(keys: Vec<Option<i32>>) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int32, true)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int32Array::from(keys))]).unwrap()
    }

    fn keys(partitions: usize) -> BuildKeys {
        BuildKeys::new(Arc::new(Column::new("k", 0)), partitions)
    }

    #[test]
    fn a_partition_that_ends_twice_abandons_the_keys() {
        let pool: Arc<dyn MemoryPool> = Arc::new(UnboundedMemoryPool::default());
        let keys = keys(2);
        keys.add(&batch_of(vec![Some(1)]), &pool).unwrap();
        keys.end(0);
        keys.add(&batch_of(vec![Some(2)]), &pool).unwrap();
        keys.end(0);
        assert!(keys.keys().is_none(), "partition 1 never ran");
        keys.end(1);
        assert!(keys.keys().is_none(), "abandoned, not completed");
    }

    #[test]
    fn keys_are_offered_once_every_partition_has_ended() {
        let pool: Arc<dyn MemoryPool> = Arc::new(UnboundedMemoryPool::default());
        let keys = keys(2);
        // Descending batches grow the bitmap downwards; nulls join nothing.
        keys.add(&batch_of(vec![Some(5_000), Some(4_990), None]), &pool)
            .unwrap();
        keys.add(&batch_of(vec![Some(10), Some(-70)]), &pool)
            .unwrap();
        keys.end(0);
        assert!(keys.keys().is_none(), "one partition is still running");
        keys.add(&batch_of(vec![Some(100_000)]), &pool).unwrap();
        keys.end(1);
        let collected = keys.keys().expect("a small bitmap");
        assert_eq!(collected.kind(), "bitmap");
        let set = crate::optimizer::apply_runtime_filters::key_set::IntegerSet::of(
            0,
            collected.clone(),
            Arc::new(Column::new("k", 0)),
        );
        let probe = batch_of(vec![
            Some(5_000),
            Some(4_991),
            Some(-70),
            Some(-71),
            None,
            Some(100_000),
            Some(100_001),
            Some(10),
        ]);
        let passed = set.evaluate(&probe).unwrap().into_array(8).unwrap();
        let passed: Vec<bool> = passed.as_boolean().iter().map(|b| b.unwrap()).collect();
        assert_eq!(passed, [true, false, true, false, false, true, false, true]);
    }

    #[test]
    fn keys_too_sparse_for_a_bitmap_are_hashed() {
        let pool: Arc<dyn MemoryPool> = Arc::new(UnboundedMemoryPool::default());
        let keys = keys(1);
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, true)]));
        let sparse = vec![i64::MIN, i64::MIN + 50_000_000, i64::MIN + 7, i64::MIN + 64];
        let batch =
            RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(sparse))]).unwrap();
        keys.add(&batch, &pool).unwrap();
        keys.end(0);
        let collected = keys.keys().expect("a few sparse keys");
        assert_eq!(collected.kind(), "hash set");
        let set = crate::optimizer::apply_runtime_filters::key_set::IntegerSet::of(
            0,
            collected.clone(),
            Arc::new(Column::new("k", 0)),
        );
        let probe: Vec<i64> = vec![
            i64::MIN,
            i64::MIN + 1,
            i64::MIN + 7,
            i64::MIN + 64,
            i64::MIN + 65,
            i64::MIN + 50_000_000,
            i64::MIN + 50_000_001,
            0,
            i64::MAX,
        ];
        let probe = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(probe))]).unwrap();
        let passed = set.evaluate(&probe).unwrap().into_array(9).unwrap();
        let passed: Vec<bool> = passed.as_boolean().iter().map(|b| b.unwrap()).collect();
        assert_eq!(
            passed,
            [true, false, true, true, false, true, false, false, false]
        );
    }

    #[test]
    fn keys_too_wide_or_over_budget_are_not_offered() {
        let unbounded: Arc<dyn MemoryPool> = Arc::new(UnboundedMemoryPool::default());
        let wide = keys(1);
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, true)]));
        let far = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![0, 1 << 40]))])
            .unwrap();
        wide.add(&far, &unbounded).unwrap();
        wide.end(0);
        assert!(wide.keys().is_none());

        let tight: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(1024));
        let over = keys(1);
        over.add(&batch_of((0..1_000_000).map(Some).collect()), &tight)
            .unwrap();
        over.end(0);
        assert!(over.keys().is_none());
        assert_eq!(
            tight.reserved(),
            0,
            "the abandoned bitmap's memory is returned"
        );
    }
}
