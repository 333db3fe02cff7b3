//! What `CREATE TABLE` needs beyond DataFusion's parser: its `PARTITIONED BY` clause
//! (taken out of the statement before parsing), the Iceberg schema of its columns and the
//! partition spec over them.

use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::common::{DataFusionError, Result};
use iceberg::spec::{Transform, UnboundPartitionSpec};

use crate::scan::provider::iceberg_error;

/// Partition fields of `PARTITIONED BY`: a source column and its transform each.
pub type PartitionFields = Vec<(String, Transform)>;

/// `CREATE TABLE … PARTITIONED BY (day(ts), bucket(16, id), region)` is not SQL DataFusion
/// parses: the clause is taken out of the statement text and returned as a partition spec
/// for the columns it names.
pub fn take_partitioned_by(sql: &str) -> Result<(String, Option<PartitionFields>)> {
    let upper = sql.to_ascii_uppercase();
    let Some(start) = find_outside_quotes(&upper, "PARTITIONED BY") else {
        return Ok((sql.to_string(), None));
    };
    let open = sql[start..].find('(').map(|i| start + i).ok_or_else(|| {
        DataFusionError::Plan("PARTITIONED BY needs a list in parentheses".into())
    })?;
    let mut depth = 0;
    let mut close = None;
    for (i, c) in sql[open..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    close = Some(open + i);
                    break;
                }
            }
            _ => {}
        }
    }
    let close =
        close.ok_or_else(|| DataFusionError::Plan("PARTITIONED BY list is not closed".into()))?;
    let mut fields = Vec::new();
    for item in split_top_level(&sql[open + 1..close]) {
        fields.push(partition_field(item.trim())?);
    }
    let rest = format!("{} {}", &sql[..start], &sql[close + 1..]);
    Ok((rest, Some(fields)))
}

fn find_outside_quotes(upper: &str, needle: &str) -> Option<usize> {
    let mut quote = None;
    for (i, c) in upper.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None if upper[i..].starts_with(needle) => return Some(i),
            None => {}
        }
    }
    None
}

fn split_top_level(list: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in list.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&list[start..]);
    parts.into_iter().filter(|p| !p.trim().is_empty()).collect()
}

/// One partition field as written in `PARTITIONED BY` (`day(ts)`, `bucket(16, id)`, `region`).
pub fn partition_field(item: &str) -> Result<(String, Transform)> {
    let bad = || {
        DataFusionError::Plan(format!(
            "partition field {item:?}: use a column, identity(c), year(c), month(c), day(c), hour(c), bucket(N, c) or truncate(N, c)"
        ))
    };
    let Some((name, args)) = item.split_once('(') else {
        return Ok((unquote(item), Transform::Identity));
    };
    let args: Vec<&str> = args
        .strip_suffix(')')
        .ok_or_else(bad)?
        .split(',')
        .map(str::trim)
        .collect();
    let number = |s: &str| s.parse::<u32>().map_err(|_| bad());
    Ok(
        match (name.trim().to_ascii_lowercase().as_str(), args.as_slice()) {
            ("identity", [c]) => (unquote(c), Transform::Identity),
            ("year" | "years", [c]) => (unquote(c), Transform::Year),
            ("month" | "months", [c]) => (unquote(c), Transform::Month),
            ("day" | "days", [c]) => (unquote(c), Transform::Day),
            ("hour" | "hours", [c]) => (unquote(c), Transform::Hour),
            ("bucket", [n, c]) => (unquote(c), Transform::Bucket(number(n)?)),
            ("truncate", [n, c]) => (unquote(c), Transform::Truncate(number(n)?)),
            _ => return Err(bad()),
        },
    )
}

fn unquote(s: &str) -> String {
    s.trim().trim_matches('"').to_string()
}

/// The Iceberg schema of a new table from the Arrow schema SQL gave it (ids assigned in
/// order; strings and binaries as Iceberg's `string` and `binary`), every column optional.
pub fn iceberg_schema(schema: &Schema) -> Result<iceberg::spec::Schema> {
    schema_of(schema, false)
}

/// The Iceberg schema of columns a `CREATE TABLE` declared: a column declared `NOT NULL` is
/// required, and a write that would put a NULL in it fails.
pub fn declared_iceberg_schema(schema: &Schema) -> Result<iceberg::spec::Schema> {
    schema_of(schema, true)
}

fn schema_of(schema: &Schema, keep_not_null: bool) -> Result<iceberg::spec::Schema> {
    let plain: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| {
            let data_type = match f.data_type() {
                DataType::Utf8View | DataType::LargeUtf8 => DataType::Utf8,
                DataType::BinaryView | DataType::LargeBinary => DataType::Binary,
                // Iceberg v2 keeps times to the microsecond and has no unsigned or small ints.
                DataType::Timestamp(_, tz) => {
                    DataType::Timestamp(TimeUnit::Microsecond, tz.clone())
                }
                DataType::Time32(_) | DataType::Time64(_) => {
                    DataType::Time64(TimeUnit::Microsecond)
                }
                DataType::Date64 => DataType::Date32,
                DataType::Int8 | DataType::Int16 | DataType::UInt8 | DataType::UInt16 => {
                    DataType::Int32
                }
                DataType::UInt32 => DataType::Int64,
                DataType::UInt64 => DataType::Decimal128(20, 0),
                DataType::Float16 => DataType::Float32,
                other => other.clone(),
            };
            Field::new(f.name(), data_type, f.is_nullable() || !keep_not_null)
        })
        .collect();
    iceberg::arrow::arrow_schema_to_schema_auto_assign_ids(&Schema::new(plain))
        .map_err(iceberg_error)
}

/// The partition spec for `fields` over `schema`.
pub fn partition_spec(
    schema: &iceberg::spec::Schema,
    fields: &[(String, Transform)],
) -> Result<UnboundPartitionSpec> {
    let mut builder = UnboundPartitionSpec::builder();
    for (column, transform) in fields {
        let source = schema.field_by_name(column).ok_or_else(|| {
            DataFusionError::Plan(format!(
                "PARTITIONED BY names {column:?}, which is not a column"
            ))
        })?;
        let name = match transform {
            Transform::Identity => column.clone(),
            Transform::Bucket(n) => format!("{column}_bucket_{n}"),
            Transform::Truncate(n) => format!("{column}_trunc_{n}"),
            other => format!("{column}_{}", other.to_string().to_ascii_lowercase()),
        };
        builder = builder
            .add_partition_field(source.id, name, *transform)
            .map_err(iceberg_error)?;
    }
    Ok(builder.build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitioned_by_is_taken_out_of_the_statement() {
        let (rest, spec) = take_partitioned_by(
            "CREATE TABLE s.t (id BIGINT, ts TIMESTAMP, r VARCHAR) PARTITIONED BY (day(ts), bucket(16, id), r) AS SELECT 1",
        )
        .unwrap();
        assert_eq!(
            rest.split_whitespace().collect::<Vec<_>>().join(" "),
            "CREATE TABLE s.t (id BIGINT, ts TIMESTAMP, r VARCHAR) AS SELECT 1"
        );
        assert_eq!(
            spec.unwrap(),
            vec![
                ("ts".to_string(), Transform::Day),
                ("id".to_string(), Transform::Bucket(16)),
                ("r".to_string(), Transform::Identity)
            ]
        );
        let (same, none) = take_partitioned_by("SELECT 'PARTITIONED BY (x)'").unwrap();
        assert_eq!(same, "SELECT 'PARTITIONED BY (x)'");
        assert!(none.is_none());
        assert!(take_partitioned_by("CREATE TABLE t (a INT) PARTITIONED BY (frob(a))").is_err());
    }
}
