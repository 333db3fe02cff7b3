//! Rows matched to a table's columns: by name when a request's rows are taken, by field id
//! when the log's entries are committed.
//!
//! A request's rows are conformed to the table's Arrow schema as it is then, which carries
//! every column's Iceberg field id (`PARQUET:field_id` in the field metadata, nested fields
//! included), and the log entry keeps that schema. When the committer writes the entry, the
//! table may have changed: a renamed column keeps its id (its values follow it), a dropped
//! one is gone (its values are dropped), an added one has no values in the entry (nulls, or
//! a misfit when it is required). Entries without ids (written before Floe kept them) are
//! matched by name.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, ListArray, MapArray, RecordBatch, StructArray, new_null_array,
};
use datafusion::arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef};
use datafusion::parquet::arrow::PARQUET_FIELD_ID_META_KEY;

use crate::Refusal;

/// How a batch's columns are found among the table's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    Name,
    Id,
}

impl Match {
    /// By id when the batch's schema carries ids, else by name.
    pub fn for_entry(schema: &Schema) -> Self {
        if schema.fields().iter().any(|f| field_id(f).is_some()) {
            Match::Id
        } else {
            Match::Name
        }
    }
}

fn field_id(field: &Field) -> Option<i32> {
    field
        .metadata()
        .get(PARQUET_FIELD_ID_META_KEY)?
        .parse()
        .ok()
}

/// A batch with the table's columns: each found by name or id (nested fields too), cast to
/// the column's type when it differs; a column the batch lacks is null when it is optional
/// and a misfit (the error, [`crate::refusal::Kind::Unfit`]) when it is required.
pub fn conform(batch: &RecordBatch, schema: &SchemaRef, by: Match) -> Result<RecordBatch, Refusal> {
    let columns = columns(
        batch.schema().fields(),
        batch.columns(),
        schema.fields(),
        batch.num_rows(),
        by,
        "",
    )?;
    RecordBatch::try_new(schema.clone(), columns).map_err(|e| Refusal::unfit(e.to_string()))
}

/// How many leaf columns a schema has (what a row of nulls costs per value).
pub fn leaf_count(fields: &Fields) -> usize {
    fields
        .iter()
        .map(|f| match f.data_type() {
            DataType::Struct(children) => leaf_count(children).max(1),
            _ => 1,
        })
        .sum()
}

fn columns(
    from: &Fields,
    arrays: &[ArrayRef],
    to: &Fields,
    rows: usize,
    by: Match,
    path: &str,
) -> Result<Vec<ArrayRef>, Refusal> {
    to.iter()
        .map(|field| {
            let found = match by {
                Match::Name => from.iter().position(|f| f.name() == field.name()),
                Match::Id => {
                    field_id(field).and_then(|id| from.iter().position(|f| field_id(f) == Some(id)))
                }
            };
            let name = format!("{path}{}", field.name());
            match found {
                Some(index) => array(&arrays[index], field, by, &name),
                None if field.is_nullable() => Ok(new_null_array(field.data_type(), rows)),
                None => Err(Refusal::unfit(format!("required column {name} is missing"))),
            }
        })
        .collect()
}

/// `array` as the column `to` (named `name` in messages).
fn array(array: &ArrayRef, to: &Field, by: Match, name: &str) -> Result<ArrayRef, Refusal> {
    let fail =
        |e: datafusion::arrow::error::ArrowError| Refusal::unfit(format!("column {name}: {e}"));
    match (array.data_type(), to.data_type()) {
        (from, to) if from == to => Ok(array.clone()),
        (DataType::Struct(from), DataType::Struct(to)) => {
            let values = array.as_struct();
            let children = columns(
                from,
                values.columns(),
                to,
                values.len(),
                by,
                &format!("{name}."),
            )?;
            let values = StructArray::try_new(to.clone(), children, values.nulls().cloned())
                .map_err(fail)?;
            Ok(Arc::new(values))
        }
        (DataType::List(_), DataType::List(to_element)) => {
            let list = array.as_list::<i32>();
            let element = self::array(list.values(), to_element, by, &format!("{name}.element"))?;
            let list = ListArray::try_new(
                to_element.clone(),
                list.offsets().clone(),
                element,
                list.nulls().cloned(),
            )
            .map_err(fail)?;
            Ok(Arc::new(list))
        }
        (DataType::Map(from_entries, _), DataType::Map(to_entries, sorted)) => {
            let (DataType::Struct(from_kv), DataType::Struct(to_kv)) =
                (from_entries.data_type(), to_entries.data_type())
            else {
                return Err(Refusal::unfit(format!(
                    "column {name}: a map without key and value"
                )));
            };
            let map = array.as_map();
            let entries = map.entries();
            let kv = columns(
                from_kv,
                entries.columns(),
                to_kv,
                entries.len(),
                by,
                &format!("{name}."),
            )?;
            let entries = StructArray::try_new(to_kv.clone(), kv, None).map_err(fail)?;
            let map = MapArray::try_new(
                to_entries.clone(),
                map.offsets().clone(),
                entries,
                map.nulls().cloned(),
                *sorted,
            )
            .map_err(fail)?;
            Ok(Arc::new(map))
        }
        (_, to_type) => datafusion::arrow::compute::cast(array, to_type).map_err(|e| {
            Refusal::unfit(format!("column {name}: cannot be read as {to_type}: {e}"))
        }),
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::ipc::writer::StreamWriter;
    use iceberg::spec::{NestedField, PrimitiveType, StructType, Type};

    use super::*;

    fn table(fields: Vec<NestedField>) -> SchemaRef {
        let schema = iceberg::spec::Schema::builder()
            .with_fields(fields.into_iter().map(Arc::new))
            .build()
            .unwrap();
        Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema).unwrap())
    }

    fn long(id: i32, name: &str, required: bool) -> NestedField {
        if required {
            NestedField::required(id, name, Type::Primitive(PrimitiveType::Long))
        } else {
            NestedField::optional(id, name, Type::Primitive(PrimitiveType::Long))
        }
    }

    fn point(id: i32, children: Vec<NestedField>) -> NestedField {
        NestedField::optional(
            id,
            "point",
            Type::Struct(StructType::new(
                children.into_iter().map(Arc::new).collect(),
            )),
        )
    }

    /// A request's rows as the log keeps them: conformed by name, written as IPC, read back.
    fn logged(schema: &SchemaRef, batch: &RecordBatch) -> RecordBatch {
        let conformed = conform(batch, schema, Match::Name).unwrap();
        let mut bytes = Vec::new();
        let mut writer = StreamWriter::try_new(&mut bytes, &conformed.schema()).unwrap();
        writer.write(&conformed).unwrap();
        writer.finish().unwrap();
        drop(writer);
        let decoded =
            crate::decode::ipc::decode_stream(&bytes::Bytes::from(bytes), usize::MAX).unwrap();
        decoded.batches.into_iter().next().unwrap()
    }

    fn request() -> RecordBatch {
        let point = StructArray::try_new(
            vec![
                Field::new("x", DataType::Int64, true),
                Field::new("y", DataType::Int64, true),
            ]
            .into(),
            vec![
                Arc::new(Int64Array::from(vec![10, 20])),
                Arc::new(Int64Array::from(vec![11, 21])),
            ],
            None,
        )
        .unwrap();
        RecordBatch::try_from_iter([
            ("id", Arc::new(Int64Array::from(vec![1, 2])) as ArrayRef),
            ("name", Arc::new(StringArray::from(vec!["a", "b"]))),
            ("point", Arc::new(point)),
        ])
        .unwrap()
    }

    fn before() -> SchemaRef {
        table(vec![
            long(1, "id", false),
            NestedField::optional(2, "name", Type::Primitive(PrimitiveType::String)),
            point(3, vec![long(4, "x", false), long(5, "y", false)]),
        ])
    }

    #[test]
    fn log_entries_keep_the_tables_field_ids() {
        let entry = logged(&before(), &request());
        assert_eq!(Match::for_entry(&entry.schema()), Match::Id);
        let ids: Vec<_> = entry
            .schema()
            .fields()
            .iter()
            .map(|f| field_id(f).unwrap())
            .collect();
        assert_eq!(ids, [1, 2, 3]);
        let DataType::Struct(children) = entry.schema().field(2).data_type().clone() else {
            panic!("point is a struct");
        };
        assert_eq!(field_id(&children[1]), Some(5));
    }

    #[test]
    fn renamed_columns_keep_their_values_and_dropped_ones_go() {
        let entry = logged(&before(), &request());
        // `name` dropped, `id` renamed `key`, `point.y` renamed `point.lat`, `point.z` and
        // `note` added (optional).
        let after = table(vec![
            long(1, "key", false),
            point(
                3,
                vec![
                    long(4, "x", false),
                    long(5, "lat", false),
                    long(7, "z", false),
                ],
            ),
            NestedField::optional(6, "note", Type::Primitive(PrimitiveType::String)),
        ]);
        let committed = conform(&entry, &after, Match::Id).unwrap();
        let keys = committed
            .column(0)
            .as_primitive::<datafusion::arrow::datatypes::Int64Type>();
        assert_eq!(keys.values(), &[1, 2]);
        let point = committed.column(1).as_struct();
        let lat = point
            .column(1)
            .as_primitive::<datafusion::arrow::datatypes::Int64Type>();
        assert_eq!(lat.values(), &[11, 21]);
        assert_eq!(point.column(2).null_count(), 2);
        assert_eq!(committed.column(2).null_count(), 2);
        // By name, as before, the renamed columns would have been nulls.
        let by_name = conform(&entry, &after, Match::Name).unwrap();
        assert_eq!(by_name.column(0).null_count(), 2);
    }

    #[test]
    fn a_required_column_the_entry_lacks_is_a_misfit() {
        let entry = logged(&before(), &request());
        let after = table(vec![long(1, "id", false), long(8, "tenant", true)]);
        assert_eq!(
            conform(&entry, &after, Match::Id).unwrap_err(),
            Refusal::unfit("required column tenant is missing")
        );
        let nested = table(vec![point(
            3,
            vec![long(4, "x", false), long(9, "w", true)],
        )]);
        assert_eq!(
            conform(&entry, &nested, Match::Id).unwrap_err(),
            Refusal::unfit("required column point.w is missing")
        );
    }

    #[test]
    fn entries_without_ids_are_matched_by_name() {
        let plain = request();
        assert_eq!(Match::for_entry(&plain.schema()), Match::Name);
        let conformed = conform(&plain, &before(), Match::for_entry(&plain.schema())).unwrap();
        assert_eq!(conformed.column(0).as_ref(), plain.column(0).as_ref());
        assert_eq!(leaf_count(before().fields()), 4);
    }
}
