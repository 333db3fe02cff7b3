//! Partial aggregation over few groups of short keys.
//!
//! DataFusion finds a row's group by hashing its key columns and comparing them with the
//! stored keys column by column, in code general enough for any number of groups and any
//! string length: TPC-H Q1's two one-letter columns cost 34 ns a row that way, more than all
//! eight of its aggregates. Most groupings in reports are like that: a status, a flag, a
//! country, a date — few distinct values, each a few bytes. [`FewGroups`] puts a
//! [`FewGroupsExec`] in place of every partial `AggregateExec` whose keys are integers, dates,
//! decimals, booleans or strings: it takes each key as one 128-bit value (a string of up to 12
//! bytes is its whole Arrow view), finds the group in a small open-addressing table, and
//! hands the group ids to DataFusion's own accumulators. Whether the groups are few is learnt
//! at run time: when a partition meets its [`MOST_GROUPS`]th + 1 group, or a string longer
//! than 12 bytes, it emits what it has aggregated and hands the rest of its input to the
//! `AggregateExec` it replaced, which goes on as DataFusion would have from the start.
//!
//! It fires on a partial aggregation with one grouping set of 2 to [`MOST_COLUMNS`] keys of
//! string or binary views, booleans, integers, dates or `Decimal128`, no row limit, no dynamic
//! filter, input in no useful order, and aggregates that all have group accumulators and no
//! `ORDER BY` or `DISTINCT`. It refuses floating-point keys (their equality is not their bits':
//! NaNs, −0), other string encodings, a single key, grouping sets, sorted input, and limited,
//! ordered or distinct aggregations.
//!
//! Why the answer cannot change: each key's word is one-to-one on its values (integers and
//! decimals sign-extended, a view its length and bytes with the padding masked), and a null is
//! word 0 with its bit set in the row's null mask, so two rows share a group exactly when all
//! their keys are equal, nulls grouping together as in `GROUP BY`. DataFusion's accumulators get
//! the same arguments, `FILTER` masks and group ids as in its own aggregation. A partial
//! aggregation may emit a group more than once (here: before and after handing over), since
//! the final aggregation merges partial states; groups leave from the partition that read
//! them, under the aggregation's own schema and partitioning.
//!
//! Open: the groups' states are not counted against the memory budget, so aggregates whose
//! state grows with the rows (`array_agg`, `string_agg`, `median`) can pass it where DataFusion
//! would have emitted early.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, ArrowPrimitiveType, AsArray, BinaryViewArray, BooleanArray, PrimitiveArray,
    RecordBatch, StringViewArray,
};
use datafusion::arrow::buffer::{BooleanBuffer, NullBuffer, ScalarBuffer};
use datafusion::arrow::datatypes::{
    DataType, Date32Type, Date64Type, Decimal128Type, Int8Type, Int16Type, Int32Type, Int64Type,
    UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use datafusion::common::config::ConfigOptions;
use datafusion::common::{DataFusionError, Result, internal_err};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{
    AggregateExec, AggregateMode, aggregate_expressions, evaluate_group_by, evaluate_many,
};
use datafusion::physical_plan::metrics::{
    BaselineMetrics, Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, InputOrderMode, PlanProperties,
};
use futures::{StreamExt, TryStreamExt};

use crate::optimizer::utils::{StreamSource, map_children};

/// The most groups a partition keeps in its own table before handing over to DataFusion.
const MOST_GROUPS: usize = 1024;
/// Slots of the table: four per group at most, so probes stay short.
const SLOTS: usize = 4 * MOST_GROUPS;
/// Rows prepared and looked up at a time.
const CHUNK: usize = 1024;
/// Key columns handled (each one's nullness is a bit of a 64-bit mask).
const MOST_COLUMNS: usize = 16;

/// The physical optimizer rule; see the module documentation.
#[derive(Debug, Default)]
pub struct FewGroups;

impl PhysicalOptimizerRule for FewGroups {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        rewrite(plan)
    }

    fn name(&self) -> &str {
        "floe_few_groups"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

fn rewrite(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    let plan = map_children(plan, |_, child| rewrite(child))?;
    match plan.downcast_ref::<AggregateExec>() {
        Some(aggregate) if eligible(aggregate) => Ok(Arc::new(FewGroupsExec::new(plan.clone()))),
        _ => Ok(plan),
    }
}

/// A partial aggregation of plain groups (no grouping sets, no limit, input in no useful
/// order) over two or more keys of supported types (DataFusion's grouping on one column is
/// specialized already, and faster on it than this), whose aggregates all have group accumulators and need no
/// ordering or distinct values.
fn eligible(aggregate: &AggregateExec) -> bool {
    let group_by = aggregate.group_expr();
    let keys = group_by.expr().len();
    let schema = aggregate.schema();
    *aggregate.mode() == AggregateMode::Partial
        && group_by.is_single()
        && (2..=MOST_COLUMNS).contains(&keys)
        && aggregate.limit_options().is_none()
        && aggregate.dynamic_filter_expr().is_none()
        && *aggregate.input_order_mode() == InputOrderMode::Linear
        && schema.fields()[..keys]
            .iter()
            .all(|f| supported(f.data_type()))
        && aggregate.aggr_expr().iter().all(|a| {
            a.groups_accumulator_supported() && a.order_bys().is_empty() && !a.is_distinct()
        })
}

fn supported(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Utf8View
            | DataType::BinaryView
            | DataType::Boolean
            | DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64
            | DataType::Date32
            | DataType::Date64
            | DataType::Decimal128(_, _)
    )
}

/// A partial `AggregateExec` run over a small table of short keys while its groups are few;
/// see the module documentation.
#[derive(Debug)]
pub struct FewGroupsExec {
    /// The `AggregateExec` replaced, which takes over when the groups are not few.
    aggregate: Arc<dyn ExecutionPlan>,
    metrics: ExecutionPlanMetricsSet,
}

impl FewGroupsExec {
    fn new(aggregate: Arc<dyn ExecutionPlan>) -> Self {
        Self {
            aggregate,
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }
}

impl FewGroupsExec {
    /// `aggregate` (an `AggregateExec`) run as a `FewGroupsExec`, for a plan that travelled.
    pub(crate) fn over(aggregate: Arc<dyn ExecutionPlan>) -> Result<Self> {
        // A travelled plan is checked as the rule checks the plans it makes: the key table
        // assumes what `eligible` makes sure of (at most `MOST_COLUMNS` keys of known types).
        match aggregate.downcast_ref::<AggregateExec>() {
            Some(exec) if eligible(exec) => Ok(Self::new(aggregate)),
            Some(_) => datafusion::common::plan_err!(
                "this aggregation cannot run as FewGroupsExec (its keys or aggregates do not qualify)"
            ),
            None => datafusion::common::internal_err!("FewGroupsExec runs an AggregateExec"),
        }
    }

    /// The `AggregateExec` replaced.
    pub(crate) fn aggregate(&self) -> &Arc<dyn ExecutionPlan> {
        &self.aggregate
    }
}

/// The `AggregateExec` a [`FewGroupsExec`] was made over.
fn aggregate_of(plan: &Arc<dyn ExecutionPlan>) -> &AggregateExec {
    plan.downcast_ref::<AggregateExec>()
        .expect("made over an AggregateExec")
}

impl DisplayAs for FewGroupsExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "FewGroupsExec: ")?;
        self.aggregate.fmt_as(t, f)
    }
}

impl ExecutionPlan for FewGroupsExec {
    fn name(&self) -> &str {
        "FewGroupsExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.aggregate.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        self.aggregate.children()
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(Self::new(
            self.aggregate.clone().with_new_children(children)?,
        )))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let aggregate = aggregate_of(&self.aggregate);
        let input = aggregate.input().execute(partition, context.clone())?;
        let key_types = aggregate.schema().fields()[..aggregate.group_expr().expr().len()]
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        let run = Run {
            plan: self.aggregate.clone(),
            partition,
            context,
            groups: Groups::new(key_types),
            accumulators: aggregate
                .aggr_expr()
                .iter()
                .map(|a| a.create_groups_accumulator())
                .collect::<Result<_>>()?,
            arguments: aggregate_expressions(aggregate.aggr_expr(), aggregate.mode(), 0)?,
            filters: aggregate.filter_expr().to_vec(),
            indices: Vec::new(),
            baseline: BaselineMetrics::new(&self.metrics, partition),
            handed_over: MetricBuilder::new(&self.metrics).counter("handed_over", partition),
        };
        let schema = self.schema();
        let stream = futures::stream::once(run.consume(input)).try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }
}

/// One partition's aggregation.
struct Run {
    plan: Arc<dyn ExecutionPlan>,
    partition: usize,
    context: Arc<TaskContext>,
    groups: Groups,
    accumulators: Vec<Box<dyn GroupsAccumulator>>,
    arguments: Vec<Vec<Arc<dyn PhysicalExpr>>>,
    filters: Vec<Option<Arc<dyn PhysicalExpr>>>,
    indices: Vec<usize>,
    baseline: BaselineMetrics,
    handed_over: Count,
}

impl Run {
    /// Aggregates the input; the result is the stream of what remains to be output.
    async fn consume(
        mut self,
        mut input: SendableRecordBatchStream,
    ) -> Result<SendableRecordBatchStream> {
        while let Some(batch) = input.next().await {
            let batch = batch?;
            let elapsed = self.baseline.elapsed_compute().clone();
            let timer = elapsed.timer();
            let taken = self.aggregate(&batch)?;
            timer.done();
            if !taken {
                return self.hand_over(batch, input);
            }
        }
        let elapsed = self.baseline.elapsed_compute().clone();
        let timer = elapsed.timer();
        let emitted = self.emit()?;
        timer.done();
        let schema = self.plan.schema();
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, emitted)))
    }

    /// Adds a batch's rows to their groups; false (and nothing added) when a key is too long
    /// or there would be too many groups.
    fn aggregate(&mut self, batch: &RecordBatch) -> Result<bool> {
        let keys = evaluate_group_by(aggregate_of(&self.plan).group_expr(), batch)?
            .pop()
            .ok_or_else(|| DataFusionError::Internal("one grouping set".into()))?;
        if !self.groups.intern(&keys, &mut self.indices)? {
            return Ok(false);
        }
        let values = evaluate_many(&self.arguments, batch)?;
        let total = self.groups.len();
        for ((accumulator, values), filter) in
            self.accumulators.iter_mut().zip(&values).zip(&self.filters)
        {
            let filter = filter
                .as_ref()
                .map(|f| f.evaluate(batch)?.into_array(batch.num_rows()))
                .transpose()?;
            accumulator.update_batch(
                values,
                &self.indices,
                filter.as_ref().map(|f| f.as_boolean()),
                total,
            )?;
        }
        Ok(true)
    }

    /// Every group's keys and accumulated state, as the partial aggregation outputs them: a
    /// stream of one batch, or of none when there are no groups.
    fn emit(
        &mut self,
    ) -> Result<futures::stream::Iter<std::option::IntoIter<Result<RecordBatch>>>> {
        if self.groups.len() == 0 {
            return Ok(futures::stream::iter(None));
        }
        let mut columns = self.groups.emit()?;
        for accumulator in &mut self.accumulators {
            columns.extend(accumulator.state(EmitTo::All)?);
        }
        let batch = RecordBatch::try_new(self.plan.schema(), columns)?;
        self.baseline.record_output(batch.num_rows());
        Ok(futures::stream::iter(Some(Ok(batch))))
    }

    /// Emits what this partition has aggregated and lets the `AggregateExec` replaced
    /// aggregate `batch` and the rest of `input`.
    fn hand_over(
        mut self,
        batch: RecordBatch,
        input: SendableRecordBatchStream,
    ) -> Result<SendableRecordBatchStream> {
        self.handed_over.add(1);
        let emitted = self.emit()?;
        let source = Arc::new(StreamSource::resuming(
            batch,
            input,
            aggregate_of(&self.plan).input().properties().clone(),
        ));
        let aggregate = self.plan.clone().with_new_children(vec![source])?;
        let rest = aggregate.execute(self.partition, self.context.clone())?;
        let schema = self.plan.schema();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            schema,
            emitted.chain(rest),
        )))
    }
}

/// The groups of one partition: each key column's values as 128-bit words, in a table of
/// [`SLOTS`] slots probed linearly.
struct Groups {
    types: Vec<DataType>,
    /// Per key column, each group's value.
    values: Vec<Vec<u128>>,
    /// Per group, which of its keys are null (bit per column).
    nulls: Vec<u64>,
    hashes: Vec<u64>,
    /// Group id + 1 per slot; 0 is free.
    slots: Vec<u32>,
    /// Scratch: the batch's keys as words, column by column, and per row hash and nulls.
    words: Vec<Vec<u128>>,
    row_hashes: Vec<u64>,
    row_nulls: Vec<u64>,
}

impl Groups {
    fn new(types: Vec<DataType>) -> Self {
        let columns = types.len();
        Self {
            types,
            values: vec![Vec::new(); columns],
            nulls: Vec::new(),
            hashes: Vec::new(),
            slots: vec![0; SLOTS],
            words: vec![Vec::new(); columns],
            row_hashes: Vec::new(),
            row_nulls: Vec::new(),
        }
    }

    fn len(&self) -> usize {
        self.hashes.len()
    }

    /// The group of every row of `keys` into `indices`, adding new groups; false, with no group
    /// added, when a key is not one word or the groups would be more than [`MOST_GROUPS`].
    fn intern(&mut self, keys: &[ArrayRef], indices: &mut Vec<usize>) -> Result<bool> {
        let rows = keys.first().map_or(0, |k| k.len());
        let before = self.len();
        indices.clear();
        // A chunk at a time, so its words and hashes stay in the first-level cache between
        // being made and being looked up.
        for start in (0..rows).step_by(CHUNK) {
            let chunk = start..(start + CHUNK).min(rows);
            if !self.prepare(keys, chunk)? || !self.find_all(indices) {
                self.forget_from(before);
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The words, hashes and null masks of the rows `chunk`; false when a key is not one word.
    fn prepare(&mut self, keys: &[ArrayRef], chunk: Range<usize>) -> Result<bool> {
        self.row_hashes.clear();
        self.row_hashes.resize(chunk.len(), 0);
        self.row_nulls.clear();
        self.row_nulls.resize(chunk.len(), 0);
        let mut nulls_seen = false;
        for (column, key) in keys.iter().enumerate() {
            let words = &mut self.words[column];
            words.clear();
            if !hashed_words(key, chunk.clone(), words, &mut self.row_hashes)? {
                return Ok(false);
            }
            if let Some(nulls) = key.logical_nulls().filter(|n| n.null_count() > 0) {
                let nulls = nulls.slice(chunk.start, chunk.len());
                if nulls.null_count() > 0 {
                    nulls_seen = true;
                    for (row, valid) in nulls.iter().enumerate() {
                        if !valid {
                            words[row] = 0;
                            self.row_nulls[row] |= 1 << column;
                        }
                    }
                }
            }
        }
        if nulls_seen {
            // A null's word was arbitrary when hashed: hash the rows again, nulls included.
            for (row, hash) in self.row_hashes.iter_mut().enumerate() {
                *hash = self
                    .words
                    .iter()
                    .fold(0, |hash, words| mix(hash, words[row]));
                *hash = mix(*hash, self.row_nulls[row] as u128);
            }
        }
        Ok(true)
    }

    /// Appends the group of every prepared row to `indices`; false when there would be too
    /// many groups.
    fn find_all(&mut self, indices: &mut Vec<usize>) -> bool {
        for row in 0..self.row_hashes.len() {
            match self.find_or_add(row, self.row_hashes[row]) {
                Some(group) => indices.push(group),
                None => return false,
            }
        }
        true
    }

    fn slot_of(hash: u64) -> usize {
        (hash >> (64 - SLOTS.trailing_zeros())) as usize
    }

    fn find_or_add(&mut self, row: usize, hash: u64) -> Option<usize> {
        let mut slot = Self::slot_of(hash);
        loop {
            let entry = self.slots[slot] as usize;
            if entry == 0 {
                if self.len() == MOST_GROUPS {
                    return None;
                }
                let group = self.len();
                self.hashes.push(hash);
                self.nulls.push(self.row_nulls[row]);
                for (values, words) in self.values.iter_mut().zip(&self.words) {
                    values.push(words[row]);
                }
                self.slots[slot] = group as u32 + 1;
                return Some(group);
            }
            let group = entry - 1;
            if self.hashes[group] == hash
                && self.nulls[group] == self.row_nulls[row]
                && self
                    .values
                    .iter()
                    .zip(&self.words)
                    .all(|(values, words)| values[group] == words[row])
            {
                return Some(group);
            }
            slot = (slot + 1) % SLOTS;
        }
    }

    /// Drops the groups from `group` on (those a refused batch added) and their slots.
    fn forget_from(&mut self, group: usize) {
        self.hashes.truncate(group);
        self.nulls.truncate(group);
        self.values.iter_mut().for_each(|v| v.truncate(group));
        self.slots.fill(0);
        for (group, &hash) in self.hashes.iter().enumerate() {
            let mut slot = Self::slot_of(hash);
            while self.slots[slot] != 0 {
                slot = (slot + 1) % SLOTS;
            }
            self.slots[slot] = group as u32 + 1;
        }
    }

    /// The groups' keys as arrays of their types.
    fn emit(&self) -> Result<Vec<ArrayRef>> {
        self.types
            .iter()
            .zip(&self.values)
            .enumerate()
            .map(|(column, (data_type, values))| {
                let nulls = self.nulls.iter().any(|n| n >> column & 1 == 1).then(|| {
                    NullBuffer::new(BooleanBuffer::collect_bool(values.len(), |g| {
                        self.nulls[g] >> column & 1 == 0
                    }))
                });
                from_words(data_type, values, nulls)
            })
            .collect()
    }
}

/// Folds a key word into a row's hash.
fn mix(hash: u64, word: u128) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let folded = (word as u64) ^ ((word >> 64) as u64).rotate_left(31);
    (hash.rotate_left(23) ^ folded).wrapping_mul(K)
}

/// Each view's bits that count: the length and that many bytes (the padding after a short
/// string need not be zero), by length.
const VIEW_MASKS: [u128; 13] = {
    let mut masks = [u128::MAX; 13];
    let mut len = 0;
    while len < 12 {
        masks[len] = (1 << (32 + 8 * len)) - 1;
        len += 1;
    }
    masks
};

macro_rules! primitive_words {
    ($array:expr, $rows:expr, $words:expr, $hashes:expr, $type:ty) => {
        $words.extend(
            $array.as_primitive::<$type>().values()[$rows]
                .iter()
                .zip($hashes.iter_mut())
                .map(|(&v, hash)| {
                    let word = v as u128;
                    *hash = mix(*hash, word);
                    word
                }),
        )
    };
}

/// Appends the values of `array`'s `rows` as words (a null's word is arbitrary) and folds
/// each into its row's hash; false when some string is longer than the 12 bytes an Arrow
/// view holds in itself.
fn hashed_words(
    array: &ArrayRef,
    rows: Range<usize>,
    words: &mut Vec<u128>,
    hashes: &mut [u64],
) -> Result<bool> {
    match array.data_type() {
        DataType::Utf8View | DataType::BinaryView => {
            let views: &[u128] = match array.data_type() {
                DataType::Utf8View => array.as_string_view().views(),
                _ => array.as_binary_view().views(),
            };
            let mut longest = 0;
            words.extend(
                views[rows]
                    .iter()
                    .zip(hashes.iter_mut())
                    .map(|(&view, hash)| {
                        let length = view as u32;
                        longest = longest.max(length);
                        let word = view & VIEW_MASKS[(length as usize).min(12)];
                        *hash = mix(*hash, word);
                        word
                    }),
            );
            if longest > 12 {
                return Ok(false);
            }
        }
        DataType::Boolean => words.extend(
            array
                .as_boolean()
                .values()
                .slice(rows.start, rows.len())
                .iter()
                .zip(hashes.iter_mut())
                .map(|(b, hash)| {
                    let word = u128::from(b);
                    *hash = mix(*hash, word);
                    word
                }),
        ),
        DataType::Int8 => primitive_words!(array, rows, words, hashes, Int8Type),
        DataType::Int16 => primitive_words!(array, rows, words, hashes, Int16Type),
        DataType::Int32 => primitive_words!(array, rows, words, hashes, Int32Type),
        DataType::Int64 => primitive_words!(array, rows, words, hashes, Int64Type),
        DataType::UInt8 => primitive_words!(array, rows, words, hashes, UInt8Type),
        DataType::UInt16 => primitive_words!(array, rows, words, hashes, UInt16Type),
        DataType::UInt32 => primitive_words!(array, rows, words, hashes, UInt32Type),
        DataType::UInt64 => primitive_words!(array, rows, words, hashes, UInt64Type),
        DataType::Date32 => primitive_words!(array, rows, words, hashes, Date32Type),
        DataType::Date64 => primitive_words!(array, rows, words, hashes, Date64Type),
        DataType::Decimal128(_, _) => primitive_words!(array, rows, words, hashes, Decimal128Type),
        other => return internal_err!("FewGroupsExec over a {other} key"),
    }
    Ok(true)
}

fn primitive<T: ArrowPrimitiveType>(
    data_type: &DataType,
    values: impl Iterator<Item = T::Native>,
    nulls: Option<NullBuffer>,
) -> ArrayRef {
    Arc::new(
        PrimitiveArray::<T>::new(ScalarBuffer::from_iter(values), nulls)
            .with_data_type(data_type.clone()),
    )
}

/// The array of `data_type` whose values are `words` (as [`hashed_words`] made them).
fn from_words(data_type: &DataType, words: &[u128], nulls: Option<NullBuffer>) -> Result<ArrayRef> {
    macro_rules! narrow {
        ($type:ty, $native:ty) => {
            primitive::<$type>(data_type, words.iter().map(|&w| w as $native), nulls)
        };
    }
    Ok(match data_type {
        DataType::Utf8View => Arc::new(StringViewArray::try_new(
            ScalarBuffer::from(words.to_vec()),
            Vec::new(),
            nulls,
        )?),
        DataType::BinaryView => Arc::new(BinaryViewArray::try_new(
            ScalarBuffer::from(words.to_vec()),
            Vec::new(),
            nulls,
        )?),
        DataType::Boolean => Arc::new(BooleanArray::new(
            BooleanBuffer::collect_bool(words.len(), |i| words[i] != 0),
            nulls,
        )),
        DataType::Int8 => narrow!(Int8Type, i8),
        DataType::Int16 => narrow!(Int16Type, i16),
        DataType::Int32 => narrow!(Int32Type, i32),
        DataType::Int64 => narrow!(Int64Type, i64),
        DataType::UInt8 => narrow!(UInt8Type, u8),
        DataType::UInt16 => narrow!(UInt16Type, u16),
        DataType::UInt32 => narrow!(UInt32Type, u32),
        DataType::UInt64 => narrow!(UInt64Type, u64),
        DataType::Date32 => narrow!(Date32Type, i32),
        DataType::Date64 => narrow!(Date64Type, i64),
        DataType::Decimal128(_, _) => narrow!(Decimal128Type, i128),
        other => return internal_err!("FewGroupsExec over a {other} key"),
    })
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Decimal128Array, Int32Array};
    use datafusion::arrow::datatypes::{Field, Schema};
    use datafusion::arrow::util::pretty::pretty_format_batches;
    use datafusion::datasource::MemTable;
    use datafusion::execution::session_state::SessionStateBuilder;
    use datafusion::physical_plan::{collect, displayable};
    use datafusion::prelude::{SessionConfig, SessionContext};

    use super::*;

    const QUERY: &str = "SELECT flag, status, n, count(*) AS rows, sum(price) AS total, \
        avg(price) AS mean, min(flag) AS least, max(n) FILTER (WHERE price > 0) AS most \
        FROM t GROUP BY flag, status, n ORDER BY flag, status, n";

    /// Batches of (flag, status, n, price): `rows` rows, `distinct` key combinations (some
    /// with null keys), strings of `width` characters.
    fn batches(rows: usize, distinct: usize, width: usize) -> (Arc<Schema>, Vec<RecordBatch>) {
        let schema = Arc::new(Schema::new(vec![
            Field::new("flag", DataType::Utf8View, true),
            Field::new("status", DataType::Utf8View, true),
            Field::new("n", DataType::Int32, true),
            Field::new("price", DataType::Decimal128(15, 2), true),
        ]));
        let batch = |from: usize, to: usize| {
            let key = |i: usize| (i * 7919) % distinct;
            let flag: StringViewArray = (from..to)
                .map(|i| (key(i) % 5 != 4).then(|| format!("{:>width$}", key(i) % 3)))
                .collect();
            let status: StringViewArray = (from..to)
                .map(|i| Some(format!("s{}", key(i) / 3)))
                .collect();
            let n: Int32Array = (from..to)
                .map(|i| (key(i) % 7 != 0).then_some(-(key(i) as i32)))
                .collect();
            let price = Decimal128Array::from(
                (from..to)
                    .map(|i| (i % 11 != 0).then_some(i as i128 * 37 - 500))
                    .collect::<Vec<_>>(),
            )
            .with_precision_and_scale(15, 2)
            .unwrap();
            RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(flag),
                    Arc::new(status),
                    Arc::new(n),
                    Arc::new(price),
                ],
            )
            .unwrap()
        };
        let batches = (0..rows)
            .step_by(1000)
            .map(|from| batch(from, (from + 1000).min(rows)))
            .collect();
        (schema, batches)
    }

    /// The query's answer and plan, with or without the rule.
    async fn run(
        schema: Arc<Schema>,
        partitions: Vec<Vec<RecordBatch>>,
        few_groups: bool,
    ) -> (String, Arc<dyn ExecutionPlan>) {
        let mut state = SessionStateBuilder::new()
            .with_config(SessionConfig::new().with_target_partitions(2))
            .with_default_features();
        if few_groups {
            state = state.with_physical_optimizer_rule(Arc::new(FewGroups));
        }
        let context = SessionContext::new_with_state(state.build());
        let table = MemTable::try_new(schema, partitions).unwrap();
        context.register_table("t", Arc::new(table)).unwrap();
        let plan = context
            .sql(QUERY)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let batches = collect(plan.clone(), context.task_ctx()).await.unwrap();
        (pretty_format_batches(&batches).unwrap().to_string(), plan)
    }

    /// The `handed_over` count of the plan's `FewGroupsExec`.
    fn handed_over(plan: &Arc<dyn ExecutionPlan>) -> usize {
        let text = displayable(plan.as_ref()).indent(true).to_string();
        assert!(
            text.contains("FewGroupsExec: AggregateExec: mode=Partial"),
            "{text}"
        );
        fn find(plan: &Arc<dyn ExecutionPlan>) -> Option<usize> {
            if plan.name() == "FewGroupsExec" {
                return plan
                    .metrics()?
                    .sum_by_name("handed_over")
                    .map(|m| m.as_usize());
            }
            plan.children().into_iter().find_map(find)
        }
        find(plan).unwrap_or(0)
    }

    async fn compare(rows: usize, distinct: usize, width: usize) -> usize {
        let (schema, all) = batches(rows, distinct, width);
        let half = all.len() / 2;
        let partitions = vec![all[..half].to_vec(), all[half..].to_vec()];
        let (expected, _) = run(schema.clone(), partitions.clone(), false).await;
        let (got, plan) = run(schema, partitions, true).await;
        assert_eq!(got, expected);
        handed_over(&plan)
    }

    #[tokio::test]
    async fn few_short_keys_aggregate_as_datafusion_would() {
        assert_eq!(compare(20_000, 60, 1).await, 0);
    }

    #[tokio::test]
    async fn long_strings_hand_the_rest_over_to_datafusion() {
        // Strings of 13 bytes do not fit in a view: the first batch of each partition hands
        // over.
        assert_eq!(compare(20_000, 60, 13).await, 2);
    }

    #[tokio::test]
    async fn too_many_groups_hand_the_rest_over_to_datafusion() {
        // 5,000 key combinations pass 1,024 within the first two batches of each partition.
        assert_eq!(compare(20_000, 5_000, 1).await, 2);
    }
}
