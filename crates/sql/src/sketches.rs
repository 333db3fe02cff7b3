//! Sketches in SQL: aggregate functions that build and merge Apache DataSketches (`datasketches`
//! 0.6, whose bytes Java and C++ DataSketches read too) and scalar functions that answer from
//! stored sketches, so a dashboard over a month reads hourly rollups instead of raw rows.
//!
//! | function | what |
//! | --- | --- |
//! | `hll_sketch(x)` | aggregate: an HLL sketch (lg k 12, 8 bits per bucket) of the distinct non-null values of `x` (any type, hashed as text) |
//! | `hll_merge(s)` | aggregate: the union of HLL sketches |
//! | `hll_estimate(s)` | scalar: the distinct count a sketch estimates, rounded |
//! | `kll_sketch(x)` | aggregate: a KLL sketch (k 200) of the non-null, non-NaN numeric values of `x` |
//! | `kll_merge(s)` | aggregate: the merge of KLL sketches |
//! | `kll_quantile(s, q)` | scalar: the value at normalized rank `q` (0 to 1) a sketch estimates |
//!
//! Error bounds: an HLL sketch of lg k 12 has a relative standard error of 1.04/√4096 ≈ 1.6%
//! (within ±3.3% of the true count 95% of the time); a KLL sketch of k 200 answers a quantile
//! within a normalized rank error of about 1.65% (99% confidence), whatever the number of
//! values. Merging sketches keeps these bounds.
//!
//! Sketch bytes come from tables, so from whoever could write them: each is refused past
//! [`MAX_SKETCH_BYTES`], an HLL sketch of a larger lg k than [`HLL_LG_K`] is refused before it
//! is read (the library's hash-set reader is quadratic in a crafted image's size), and the
//! rest are decoded by the library's bounded readers; a sketch that does not decode is an
//! error naming the function, never a crash.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BinaryBuilder, Float64Builder, Int64Builder,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::execution::FunctionRegistry;
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, ColumnarValue, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};
use datasketches::common::SearchCriteria;
use datasketches::hll::{HllSketch, HllType, HllUnion};
use datasketches::kll::{KllFloat, KllSketch};

/// Largest sketch a function decodes.
pub const MAX_SKETCH_BYTES: usize = 16 << 20;
/// HLL sketches' log2 of their bucket count.
pub const HLL_LG_K: u8 = 12;
/// KLL sketches' accuracy parameter.
pub const KLL_K: u16 = 200;

/// Every sketch function registered in `state`.
pub fn register(state: &mut SessionState) -> Result<()> {
    for kind in [
        Kind::HllSketch,
        Kind::HllMerge,
        Kind::KllSketch,
        Kind::KllMerge,
    ] {
        state.register_udaf(Arc::new(AggregateUDF::from(SketchAggregate::new(kind))))?;
    }
    for answer in [Answer::HllEstimate, Answer::KllQuantile] {
        state.register_udf(Arc::new(ScalarUDF::from(SketchAnswer::new(answer))))?;
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    HllSketch,
    HllMerge,
    KllSketch,
    KllMerge,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::HllSketch => "hll_sketch",
            Kind::HllMerge => "hll_merge",
            Kind::KllSketch => "kll_sketch",
            Kind::KllMerge => "kll_merge",
        }
    }
}

/// One of the four sketch aggregates.
#[derive(Debug, PartialEq, Eq, Hash)]
struct SketchAggregate {
    kind: Kind,
    signature: Signature,
}

impl SketchAggregate {
    fn new(kind: Kind) -> Self {
        let signature = match kind {
            Kind::KllSketch => {
                Signature::uniform(1, vec![DataType::Float64], Volatility::Immutable)
            }
            _ => Signature::any(1, Volatility::Immutable),
        };
        Self { kind, signature }
    }
}

impl AggregateUDFImpl for SketchAggregate {
    fn name(&self) -> &str {
        self.kind.name()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Binary)
    }

    fn accumulator(&self, _args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(match self.kind {
            Kind::HllSketch | Kind::HllMerge => Box::new(HllAccumulator {
                union: hll_union()?,
                merging: self.kind == Kind::HllMerge,
            }),
            Kind::KllSketch | Kind::KllMerge => Box::new(KllAccumulator {
                sketch: kll_sketch()?,
                merging: self.kind == Kind::KllMerge,
            }),
        })
    }

    fn state_fields(&self, _args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![Arc::new(Field::new("sketch", DataType::Binary, true))])
    }
}

fn hll_union() -> Result<HllUnion> {
    HllUnion::new(HLL_LG_K)
        .map_err(|e| datafusion::error::DataFusionError::Execution(e.to_string()))
}

fn kll_sketch() -> Result<KllSketch<KllFloat<f64>>> {
    KllSketch::new(KLL_K).map_err(|e| datafusion::error::DataFusionError::Execution(e.to_string()))
}

/// `array` as binary values (sketches may be read back as `BinaryView` or `LargeBinary`).
fn binary(array: &ArrayRef) -> Result<ArrayRef> {
    Ok(cast(array, &DataType::Binary)?)
}

/// The sketch bytes at `row`, refused past [`MAX_SKETCH_BYTES`].
fn sketch_bytes<'a>(array: &'a ArrayRef, row: usize, function: &str) -> Result<Option<&'a [u8]>> {
    if array.is_null(row) {
        return Ok(None);
    }
    let bytes = array.as_binary::<i32>().value(row);
    if bytes.len() > MAX_SKETCH_BYTES {
        return exec_err!(
            "{function}: a sketch of {} bytes is larger than the {MAX_SKETCH_BYTES} a sketch may be",
            bytes.len()
        );
    }
    Ok(Some(bytes))
}

fn decode_hll(bytes: &[u8], function: &str) -> Result<HllSketch> {
    // Byte 3 is the sketch's lg k. Larger sketches than the ones written here are refused
    // before the library reads them: a crafted hash-set image of a large lg k makes its
    // insertion quadratic (minutes of CPU per row); at lg k 12 a set holds at most 512.
    if let Some(&lg_k) = bytes.get(3)
        && lg_k > HLL_LG_K
    {
        return exec_err!(
            "{function}: an HLL sketch of lg k {lg_k} is larger than the lg k {HLL_LG_K} sketches \
             Floe reads"
        );
    }
    HllSketch::deserialize(bytes).or_else(|e| exec_err!("{function}: not an HLL sketch: {e}"))
}

fn decode_kll(bytes: &[u8], function: &str) -> Result<KllSketch<KllFloat<f64>>> {
    KllSketch::deserialize(bytes)
        .or_else(|e| exec_err!("{function}: not a KLL sketch of doubles: {e}"))
}

/// Builds (values) or merges (sketches) an HLL union.
#[derive(Debug)]
struct HllAccumulator {
    union: HllUnion,
    merging: bool,
}

impl HllAccumulator {
    fn merge_sketches(&mut self, array: &ArrayRef, function: &str) -> Result<()> {
        let array = binary(array)?;
        for row in 0..array.len() {
            if let Some(bytes) = sketch_bytes(&array, row, function)? {
                self.union.update(&decode_hll(bytes, function)?);
            }
        }
        Ok(())
    }

    fn serialized(&self) -> ScalarValue {
        ScalarValue::Binary(Some(self.union.to_sketch(HllType::Hll8).serialize()))
    }
}

impl Accumulator for HllAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        if self.merging {
            return self.merge_sketches(&values[0], "hll_merge");
        }
        let text = cast(&values[0], &DataType::Utf8)?;
        let text = text.as_string::<i32>();
        for value in text.iter().flatten() {
            self.union.update_value(value);
        }
        Ok(())
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(self.serialized())
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.union.estimated_size()
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![self.serialized()])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.merge_sketches(&states[0], "hll_merge")
    }
}

/// Builds (values) or merges (sketches) a KLL sketch of doubles.
#[derive(Debug)]
struct KllAccumulator {
    sketch: KllSketch<KllFloat<f64>>,
    merging: bool,
}

impl KllAccumulator {
    fn merge_sketches(&mut self, array: &ArrayRef, function: &str) -> Result<()> {
        let array = binary(array)?;
        for row in 0..array.len() {
            if let Some(bytes) = sketch_bytes(&array, row, function)? {
                let other = decode_kll(bytes, function)?;
                if let Err(e) = self.sketch.merge(&other) {
                    return exec_err!("{function}: the sketches do not merge: {e}");
                }
            }
        }
        Ok(())
    }

    fn serialized(&self) -> ScalarValue {
        ScalarValue::Binary(Some(self.sketch.serialize()))
    }
}

impl Accumulator for KllAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        if self.merging {
            return self.merge_sketches(&values[0], "kll_merge");
        }
        let numbers = cast(&values[0], &DataType::Float64)?;
        let numbers = numbers.as_primitive::<datafusion::arrow::datatypes::Float64Type>();
        for value in numbers.iter().flatten() {
            if let Ok(value) = KllFloat::<f64>::new(value) {
                self.sketch.update(value);
            }
        }
        Ok(())
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(self.serialized())
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.sketch.num_retained() * 8
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![self.serialized()])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.merge_sketches(&states[0], "kll_merge")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Answer {
    HllEstimate,
    KllQuantile,
}

/// A scalar answer from a stored sketch.
#[derive(Debug, PartialEq, Eq, Hash)]
struct SketchAnswer {
    answer: Answer,
    signature: Signature,
}

impl SketchAnswer {
    fn new(answer: Answer) -> Self {
        let signature = match answer {
            Answer::HllEstimate => Signature::any(1, Volatility::Immutable),
            Answer::KllQuantile => Signature::any(2, Volatility::Immutable),
        };
        Self { answer, signature }
    }
}

impl ScalarUDFImpl for SketchAnswer {
    fn name(&self) -> &str {
        match self.answer {
            Answer::HllEstimate => "hll_estimate",
            Answer::KllQuantile => "kll_quantile",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(match self.answer {
            Answer::HllEstimate => DataType::Int64,
            Answer::KllQuantile => DataType::Float64,
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let sketches = binary(&args.args[0].to_array(rows)?)?;
        match self.answer {
            Answer::HllEstimate => {
                let mut out = Int64Builder::with_capacity(rows);
                for row in 0..rows {
                    match sketch_bytes(&sketches, row, "hll_estimate")? {
                        Some(bytes) => {
                            let estimate = decode_hll(bytes, "hll_estimate")?.estimate();
                            out.append_value(estimate.round() as i64);
                        }
                        None => out.append_null(),
                    }
                }
                Ok(ColumnarValue::Array(Arc::new(out.finish())))
            }
            Answer::KllQuantile => {
                let ranks = cast(&args.args[1].to_array(rows)?, &DataType::Float64)?;
                let ranks = ranks.as_primitive::<datafusion::arrow::datatypes::Float64Type>();
                let mut out = Float64Builder::with_capacity(rows);
                for row in 0..rows {
                    let (Some(bytes), false) = (
                        sketch_bytes(&sketches, row, "kll_quantile")?,
                        ranks.is_null(row),
                    ) else {
                        out.append_null();
                        continue;
                    };
                    let rank = ranks.value(row);
                    if !(0.0..=1.0).contains(&rank) {
                        return exec_err!("kll_quantile: the rank {rank} is not between 0 and 1");
                    }
                    let sketch = decode_kll(bytes, "kll_quantile")?;
                    match sketch.quantile(rank, SearchCriteria::Inclusive) {
                        Ok(Some(value)) => out.append_value(value.into_inner()),
                        Ok(None) => out.append_null(),
                        Err(e) => return exec_err!("kll_quantile: {e}"),
                    }
                }
                Ok(ColumnarValue::Array(Arc::new(out.finish())))
            }
        }
    }
}

/// A Binary column of `sketches` (for tests and rollups that build sketches in Rust).
pub fn sketch_column(sketches: impl IntoIterator<Item = Option<Vec<u8>>>) -> ArrayRef {
    let mut out = BinaryBuilder::new();
    for sketch in sketches {
        out.append_option(sketch);
    }
    Arc::new(out.finish())
}

#[cfg(test)]
mod tests {
    use datafusion::prelude::SessionContext;

    use super::*;

    async fn context() -> SessionContext {
        let ctx = SessionContext::new();
        let mut state = ctx.state();
        register(&mut state).unwrap();
        SessionContext::new_with_state(state)
    }

    async fn one(ctx: &SessionContext, sql: &str) -> ScalarValue {
        let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        ScalarValue::try_from_array(batches[0].column(0), 0).unwrap()
    }

    #[tokio::test]
    async fn sketches_answer_within_their_bounds_and_merge_like_the_whole() {
        let ctx = context().await;
        ctx.sql(
            "CREATE TABLE v AS SELECT value AS x, value % 7 AS part FROM generate_series(1, 200000)",
        )
        .await
        .unwrap();
        let ScalarValue::Int64(Some(distinct)) =
            one(&ctx, "SELECT hll_estimate(hll_sketch(x % 50000)) FROM v").await
        else {
            panic!("an estimate")
        };
        assert!((distinct - 50_000).abs() < 50_000 * 33 / 1000, "{distinct}");
        // Seven partial sketches merged estimate what one sketch of everything does.
        let ScalarValue::Int64(Some(merged)) = one(
            &ctx,
            "SELECT hll_estimate(hll_merge(s)) FROM \
             (SELECT part, hll_sketch(x % 50000) AS s FROM v GROUP BY part)",
        )
        .await
        else {
            panic!("an estimate")
        };
        assert_eq!(merged, distinct);
        let ScalarValue::Float64(Some(median)) = one(
            &ctx,
            "SELECT kll_quantile(kll_merge(s), 0.5) FROM \
             (SELECT part, kll_sketch(x) AS s FROM v GROUP BY part)",
        )
        .await
        else {
            panic!("a quantile")
        };
        // The true median is 100,000; within 1.65% of 200,000 values by rank.
        assert!((median - 100_000.0).abs() < 200_000.0 * 0.0165, "{median}");
    }

    #[tokio::test]
    async fn bad_sketch_bytes_are_an_error_not_a_crash() {
        let ctx = context().await;
        for sql in [
            "SELECT hll_estimate(X'00010203')",
            "SELECT kll_quantile(X'ffffffffffffffffffff', 0.5)",
            "SELECT hll_estimate(hll_merge(X'0201070c03'))",
            "SELECT kll_quantile(kll_sketch(1.0), 2.0)",
            // lg k 18 in the header: refused before the library reads the image.
            "SELECT hll_estimate(X'0301071205080100000000000000')",
        ] {
            let answer = ctx.sql(sql).await.unwrap().collect().await;
            assert!(answer.is_err(), "{sql}");
        }
    }
}
