//! `matches(text, query)`: whether `text` holds every token of `query`, as whole tokens, in
//! any order, case-insensitively ([`super::tokens`] says what a token is). NULL when either
//! is NULL; true for a query without tokens (every one of none is there).
//!
//! `matches(body, 'timeout')` is true for "Timeout calling gateway" and "read timeout; retry"
//! but not for "timeouts"; `matches(body, 'req-7f3a')` for any text holding the tokens `req`
//! and `7f3a`. Scans of a table indexing the column read only the files whose index may hold
//! every token ([`super::prune`]).

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanBuilder};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};

use super::tokens::{for_each_token, tokens};

/// The function's SQL name.
pub const NAME: &str = "matches";

/// The function, registered in every session ([`crate::register_functions`]).
pub fn udf() -> Arc<ScalarUDF> {
    static UDF: LazyLock<Arc<ScalarUDF>> =
        LazyLock::new(|| Arc::new(ScalarUDF::from(Matches::new())));
    UDF.clone()
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Matches {
    signature: Signature,
}

impl Matches {
    fn new() -> Self {
        let strings = [DataType::Utf8View, DataType::Utf8, DataType::LargeUtf8];
        let exact = strings
            .iter()
            .flat_map(|a| {
                strings
                    .iter()
                    .map(|b| TypeSignature::Exact(vec![a.clone(), b.clone()]))
            })
            .collect();
        Self {
            signature: Signature::one_of(exact, Volatility::Immutable),
        }
    }
}

/// The values of a string array, by row.
#[allow(clippy::type_complexity)]
fn strings<'a>(array: &'a ArrayRef) -> Result<Box<dyn Fn(usize) -> Option<&'a str> + 'a>> {
    Ok(match array.data_type() {
        DataType::Utf8View => {
            let a = array.as_string_view();
            Box::new(move |i| a.is_valid(i).then(|| a.value(i)))
        }
        DataType::Utf8 => {
            let a = array.as_string::<i32>();
            Box::new(move |i| a.is_valid(i).then(|| a.value(i)))
        }
        DataType::LargeUtf8 => {
            let a = array.as_string::<i64>();
            Box::new(move |i| a.is_valid(i).then(|| a.value(i)))
        }
        other => return exec_err!("{NAME}: expected text, got {other}"),
    })
}

/// Whether `text` holds every one of `wanted` (distinct, lowercased tokens).
fn holds_all(text: &str, wanted: &[String], found: &mut [bool], buffer: &mut String) -> bool {
    if wanted.is_empty() {
        return true;
    }
    found.fill(false);
    let mut missing = wanted.len();
    for_each_token(text, buffer, |token| {
        if missing == 0 {
            return;
        }
        if let Some(at) = wanted.iter().position(|w| w == token)
            && !found[at]
        {
            found[at] = true;
            missing -= 1;
        }
    });
    missing == 0
}

impl ScalarUDFImpl for Matches {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let [text, query] = args.args.as_slice() else {
            return exec_err!("{NAME} takes two arguments: the text and the query");
        };
        let text = text.to_array(rows)?;
        let texts = strings(&text)?;
        let mut out = BooleanBuilder::with_capacity(rows);
        let mut buffer = String::new();
        // The common case: one query for every row.
        if let ColumnarValue::Scalar(scalar) = query {
            let query = scalar.to_array_of_size(1)?;
            let Some(query) = strings(&query)?(0) else {
                out.append_nulls(rows);
                return Ok(ColumnarValue::Array(Arc::new(out.finish())));
            };
            let wanted = tokens(query);
            let mut found = vec![false; wanted.len()];
            for row in 0..rows {
                out.append_option(
                    texts(row).map(|t| holds_all(t, &wanted, &mut found, &mut buffer)),
                );
            }
            return Ok(ColumnarValue::Array(Arc::new(out.finish())));
        }
        let queries = query.to_array(rows)?;
        let queries = strings(&queries)?;
        for row in 0..rows {
            let (Some(text), Some(query)) = (texts(row), queries(row)) else {
                out.append_null();
                continue;
            };
            let wanted = tokens(query);
            let mut found = vec![false; wanted.len()];
            out.append_value(holds_all(text, &wanted, &mut found, &mut buffer));
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::StringArray;
    use datafusion::arrow::record_batch::RecordBatch;
    use datafusion::prelude::SessionContext;

    use super::*;

    #[tokio::test]
    async fn matches_takes_whole_tokens_in_any_order_and_case() {
        let ctx = SessionContext::new();
        ctx.register_udf(udf().as_ref().clone());
        let bodies: ArrayRef = Arc::new(StringArray::from(vec![
            Some("Timeout calling payment-gateway"),
            Some("read timeouts"),
            Some("gateway TIMEOUT"),
            None,
        ]));
        let batch = RecordBatch::try_from_iter([("body", bodies)]).unwrap();
        ctx.register_batch("t", batch).unwrap();
        let answer = |sql: &str| {
            let ctx = ctx.clone();
            let sql = sql.to_string();
            async move {
                let batches = ctx.sql(&sql).await.unwrap().collect().await.unwrap();
                datafusion::arrow::util::pretty::pretty_format_batches(&batches)
                    .unwrap()
                    .to_string()
            }
        };
        let got = answer(
            "SELECT matches(body, 'timeout') a, matches(body, 'GATEWAY timeout') b, \
             matches(body, 'payment-gateway') c, matches(body, '') d FROM t",
        )
        .await;
        let expected = "\
+-------+-------+-------+------+
| a     | b     | c     | d    |
+-------+-------+-------+------+
| true  | true  | true  | true |
| false | false | false | true |
| true  | true  | false | true |
|       |       |       |      |
+-------+-------+-------+------+";
        assert_eq!(got, expected);
        // A query per row.
        let got = answer("SELECT matches(body, body) m FROM t").await;
        assert!(got.contains("| true |"), "{got}");
    }
}
