//! `min` whose window over only NULLs is NULL.
//!
//! DataFusion 54's sliding `min` (the accumulator of a window frame that moves, such as
//! `ROWS BETWEEN 1 PRECEDING AND CURRENT ROW`) skips NULLs and keeps the last minimum it
//! computed, so once every non-null value has left the frame it answers that stale value
//! where SQL answers NULL: `min(x) OVER (ORDER BY o ROWS BETWEEN 1 PRECEDING AND CURRENT
//! ROW)` over `x` = 5, NULL, NULL answers 5, 5, 5 instead of 5, 5, NULL (found by
//! `floe bench fuzz`; `max` is right). [`Min`] is DataFusion's `min` in every respect but its
//! sliding accumulator, which counts the non-null values in the frame and answers NULL when
//! there are none. It is registered under the same name, so SQL's `min` resolves to it on the
//! coordinator and on workers alike.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue};
use datafusion::execution::FunctionRegistry;
use datafusion::execution::session_state::SessionState;
use datafusion::functions_aggregate::min_max::{self, SlidingMinAccumulator};
use datafusion::logical_expr::function::AccumulatorArgs;
use datafusion::logical_expr::utils::AggregateOrderSensitivity;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Documentation, GroupsAccumulator, ReversedUDAF,
    SetMonotonicity, Signature, StatisticsArgs,
};

/// Registers [`Min`] in `state` in place of DataFusion's `min`.
pub fn register(state: &mut SessionState) -> Result<()> {
    state.register_udaf(Arc::new(AggregateUDF::from(Min::default())))?;
    Ok(())
}

/// DataFusion's `min` with a sliding accumulator that answers NULL over no values.
#[derive(Debug, Default, PartialEq, Eq, Hash)]
pub struct Min(min_max::Min);

impl AggregateUDFImpl for Min {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn signature(&self) -> &Signature {
        self.0.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.0.return_type(arg_types)
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        self.0.accumulator(args)
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        self.0.groups_accumulator_supported(args)
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        self.0.create_groups_accumulator(args)
    }

    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let data_type = args.return_field.data_type();
        Ok(Box::new(SlidingMin {
            inner: SlidingMinAccumulator::try_new(data_type)?,
            values: 0,
            null: ScalarValue::try_from(data_type)?,
        }))
    }

    fn is_descending(&self) -> Option<bool> {
        self.0.is_descending()
    }

    fn value_from_stats(&self, args: &StatisticsArgs) -> Option<ScalarValue> {
        self.0.value_from_stats(args)
    }

    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        self.0.order_sensitivity()
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.0.coerce_types(arg_types)
    }

    fn reverse_expr(&self) -> ReversedUDAF {
        ReversedUDAF::Identical
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.0.documentation()
    }

    fn set_monotonicity(&self, data_type: &DataType) -> SetMonotonicity {
        self.0.set_monotonicity(data_type)
    }
}

/// DataFusion's sliding minimum, and how many non-null values the frame holds.
#[derive(Debug)]
struct SlidingMin {
    inner: SlidingMinAccumulator,
    values: usize,
    /// NULL of the result's type.
    null: ScalarValue,
}

fn non_null(values: &[ArrayRef]) -> usize {
    values
        .first()
        .map_or(0, |a| a.len() - a.logical_null_count())
}

impl Accumulator for SlidingMin {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.values += non_null(values);
        self.inner.update_batch(values)
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.values = self.values.saturating_sub(non_null(values));
        self.inner.retract_batch(values)
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.update_batch(states)
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![self.evaluate()?])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        if self.values == 0 {
            return Ok(self.null.clone());
        }
        self.inner.evaluate()
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn size(&self) -> usize {
        size_of_val(self) - size_of_val(&self.inner) + self.inner.size() + self.null.size()
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::Int64Array;
    use datafusion::prelude::SessionContext;

    use super::*;

    const FRAMES: &str = "SELECT min(x) OVER (ORDER BY o ROWS BETWEEN 1 PRECEDING AND CURRENT \
                          ROW) FROM (VALUES (1, 5), (2, NULL), (3, NULL), (4, 7), (5, NULL), \
                          (6, 3)) AS t(o, x) ORDER BY o";

    async fn minima(ctx: &SessionContext) -> Vec<Option<i64>> {
        let batches = ctx.sql(FRAMES).await.unwrap().collect().await.unwrap();
        batches
            .iter()
            .flat_map(|b| {
                let column = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                column.iter().collect::<Vec<_>>()
            })
            .collect()
    }

    #[tokio::test]
    async fn a_frame_of_nulls_has_no_minimum() {
        let mut state = SessionContext::new().state();
        register(&mut state).unwrap();
        let fixed = SessionContext::new_with_state(state);
        assert_eq!(
            minima(&fixed).await,
            [Some(5), Some(5), None, Some(7), Some(7), Some(3)]
        );
        // Everything else of min is DataFusion's.
        let batches = fixed
            .sql("SELECT min(x), min(DISTINCT x) FROM (VALUES (3), (NULL), (1)) AS t(x)")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let shown = datafusion::arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string();
        assert!(
            shown.contains("| 1        | 1                 |"),
            "{shown}"
        );
    }

    #[tokio::test]
    async fn datafusion_alone_still_answers_a_stale_minimum() {
        // When this fails, DataFusion fixed its sliding min and this module can go.
        let plain = SessionContext::new();
        assert_eq!(minima(&plain).await[2], Some(5));
    }
}
