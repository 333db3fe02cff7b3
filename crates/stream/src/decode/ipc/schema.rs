//! A stream's schema message, checked before arrow reads it: arrow's `fb_to_schema` unwraps
//! every type table it expects and panics on widths and units it does not know.

use std::panic::AssertUnwindSafe;

use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::arrow::ipc::{self, DateUnit, Endianness, IntervalUnit, Precision, TimeUnit, Type};

use crate::Refusal;

/// How deep columns may nest.
const MAX_DEPTH: usize = 32;

/// The schema a schema message describes, once every field checks.
pub(super) fn read(schema: ipc::Schema) -> Result<Schema, Refusal> {
    if schema.endianness() != Endianness::Little {
        return Err(Refusal::unsupported(
            "the schema is big-endian; Floe reads little-endian streams",
        ));
    }
    let fields = schema
        .fields()
        .ok_or_else(|| Refusal::malformed("the schema has no list of fields"))?;
    for (i, field) in fields.iter().enumerate() {
        check_field(field, 0).map_err(|e| e.context(format!("column {i} ({})", name(&field))))?;
    }
    std::panic::catch_unwind(AssertUnwindSafe(|| {
        datafusion::arrow::ipc::convert::fb_to_schema(schema)
    }))
    .map_err(|_| Refusal::malformed("the schema could not be read"))
}

fn name(field: &ipc::Field) -> String {
    field.name().unwrap_or_default().to_string()
}

/// The value type of the dictionary `id`, as arrow finds it (the first field using it).
pub(super) fn dictionary_values(schema: &Schema, id: i64) -> Option<DataType> {
    #[allow(deprecated)]
    let fields = schema.fields_with_dict_id(id);
    match fields.first()?.data_type() {
        DataType::Dictionary(_, values) => Some(values.as_ref().clone()),
        _ => None,
    }
}

/// Checks that arrow can turn `field` into a type without panicking, and that it is a type
/// Floe takes.
fn check_field(field: ipc::Field, depth: usize) -> Result<(), Refusal> {
    if depth > MAX_DEPTH {
        return Err(Refusal::unsupported(format!(
            "columns nest deeper than {MAX_DEPTH} levels"
        )));
    }
    if let Some(dictionary) = field.dictionary() {
        let index = dictionary
            .indexType()
            .ok_or_else(|| Refusal::malformed("a dictionary without an index type"))?;
        if !matches!(index.bitWidth(), 8 | 16 | 32 | 64) {
            return Err(Refusal::unsupported(format!(
                "a dictionary index of {} bits",
                index.bitWidth()
            )));
        }
    }
    let missing = |what: &str| Refusal::malformed(format!("a {what} field without its type table"));
    let only_child = || match field.children() {
        Some(children) if children.len() == 1 => Ok(children.get(0)),
        _ => Err(Refusal::malformed(
            "a list or map must have exactly one child",
        )),
    };
    match field.type_type() {
        Type::Null
        | Type::Bool
        | Type::Binary
        | Type::LargeBinary
        | Type::Utf8
        | Type::LargeUtf8
        | Type::BinaryView
        | Type::Utf8View => {}
        Type::Int => {
            let int = field.type_as_int().ok_or_else(|| missing("integer"))?;
            if !matches!(int.bitWidth(), 8 | 16 | 32 | 64) {
                return Err(Refusal::unsupported(format!(
                    "an integer of {} bits",
                    int.bitWidth()
                )));
            }
        }
        Type::FixedSizeBinary => {
            let fixed = field
                .type_as_fixed_size_binary()
                .ok_or_else(|| missing("fixed-size binary"))?;
            if fixed.byteWidth() < 0 {
                return Err(Refusal::malformed(format!(
                    "a fixed-size binary of {} bytes",
                    fixed.byteWidth()
                )));
            }
        }
        Type::FloatingPoint => {
            let float = field
                .type_as_floating_point()
                .ok_or_else(|| missing("floating-point"))?;
            if !matches!(
                float.precision(),
                Precision::HALF | Precision::SINGLE | Precision::DOUBLE
            ) {
                return Err(Refusal::unsupported(
                    "a floating-point precision Arrow does not know",
                ));
            }
        }
        Type::Date => {
            let date = field.type_as_date().ok_or_else(|| missing("date"))?;
            if !matches!(date.unit(), DateUnit::DAY | DateUnit::MILLISECOND) {
                return Err(Refusal::unsupported("a date unit Arrow does not know"));
            }
        }
        Type::Time => {
            let time = field.type_as_time().ok_or_else(|| missing("time"))?;
            if !matches!(
                (time.bitWidth(), time.unit()),
                (32, TimeUnit::SECOND | TimeUnit::MILLISECOND)
                    | (64, TimeUnit::MICROSECOND | TimeUnit::NANOSECOND)
            ) {
                return Err(Refusal::unsupported(
                    "a time width or unit Arrow does not know",
                ));
            }
        }
        Type::Timestamp => {
            let timestamp = field
                .type_as_timestamp()
                .ok_or_else(|| missing("timestamp"))?;
            known_unit(timestamp.unit())?;
        }
        Type::Duration => {
            let duration = field
                .type_as_duration()
                .ok_or_else(|| missing("duration"))?;
            known_unit(duration.unit())?;
        }
        Type::Interval => {
            let interval = field
                .type_as_interval()
                .ok_or_else(|| missing("interval"))?;
            if !matches!(
                interval.unit(),
                IntervalUnit::YEAR_MONTH | IntervalUnit::DAY_TIME | IntervalUnit::MONTH_DAY_NANO
            ) {
                return Err(Refusal::unsupported("an interval unit Arrow does not know"));
            }
        }
        Type::Decimal => {
            let decimal = field.type_as_decimal().ok_or_else(|| missing("decimal"))?;
            let most = match decimal.bitWidth() {
                32 => 9,
                64 => 18,
                128 => 38,
                256 => 76,
                bits => return Err(Refusal::unsupported(format!("a decimal of {bits} bits"))),
            };
            if !(1..=most).contains(&decimal.precision()) || i8::try_from(decimal.scale()).is_err()
            {
                return Err(Refusal::unsupported(format!(
                    "a decimal of precision {} and scale {}",
                    decimal.precision(),
                    decimal.scale()
                )));
            }
        }
        Type::List | Type::LargeList => check_field(only_child()?, depth + 1)?,
        Type::FixedSizeList => {
            let list = field
                .type_as_fixed_size_list()
                .ok_or_else(|| missing("fixed-size list"))?;
            if list.listSize() < 0 {
                return Err(Refusal::malformed(format!(
                    "a fixed-size list of {} values",
                    list.listSize()
                )));
            }
            check_field(only_child()?, depth + 1)?;
        }
        Type::Map => {
            field.type_as_map().ok_or_else(|| missing("map"))?;
            let entries = only_child()?;
            if entries.type_type() != Type::Struct_
                || entries.children().map(|c| c.len()) != Some(2)
            {
                return Err(Refusal::malformed(
                    "a map's entries must be a struct of key and value",
                ));
            }
            check_field(entries, depth + 1)?;
        }
        Type::Struct_ => {
            for child in field.children().into_iter().flatten() {
                check_field(child, depth + 1)
                    .map_err(|e| e.context(format!("field {}", name(&child))))?;
            }
        }
        Type::Union => {
            return Err(Refusal::unsupported(
                "union columns are not taken (an Iceberg table has none)",
            ));
        }
        other => {
            return Err(Refusal::unsupported(format!(
                "{} columns are not taken",
                other.variant_name().unwrap_or("unknown")
            )));
        }
    }
    Ok(())
}

fn known_unit(unit: TimeUnit) -> Result<(), Refusal> {
    match unit {
        TimeUnit::SECOND | TimeUnit::MILLISECOND | TimeUnit::MICROSECOND | TimeUnit::NANOSECOND => {
            Ok(())
        }
        _ => Err(Refusal::unsupported("a time unit Arrow does not know")),
    }
}
