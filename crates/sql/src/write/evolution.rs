//! Column types of new and changed columns: what an Arrow column adds to an Iceberg schema,
//! what a column may widen to, and the schema evolution a write's columns ask for.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, TimeUnit};
use floe_catalog::service::TableCommitRequest;
use iceberg::TableIdent;

/// The Iceberg type of a column added from ingested values (JSON, Arrow, registry schemas):
/// primitives, and structs, lists and maps of them whose nested fields take ids after
/// `last_id` (which is moved past them); a 400 naming the field when its type cannot be
/// added automatically.
pub fn added_type(field: &Field, last_id: &mut i32) -> floe_catalog::Result<iceberg::spec::Type> {
    added(field.name(), field.data_type(), last_id)
}

fn added(
    name: &str,
    data_type: &DataType,
    last_id: &mut i32,
) -> floe_catalog::Result<iceberg::spec::Type> {
    use iceberg::spec::{ListType, MapType, NestedField, PrimitiveType, StructType, Type};
    fn next(last_id: &mut i32) -> i32 {
        *last_id += 1;
        *last_id
    }
    Ok(Type::Primitive(match data_type {
        DataType::Boolean => PrimitiveType::Boolean,
        DataType::Int8 | DataType::Int16 | DataType::Int32 => PrimitiveType::Int,
        DataType::Int64 | DataType::UInt32 | DataType::UInt64 => PrimitiveType::Long,
        DataType::Float32 => PrimitiveType::Float,
        DataType::Float64 => PrimitiveType::Double,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => PrimitiveType::String,
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => PrimitiveType::Binary,
        DataType::Date32 => PrimitiveType::Date,
        DataType::Time64(TimeUnit::Microsecond) => PrimitiveType::Time,
        DataType::Timestamp(TimeUnit::Microsecond, None) => PrimitiveType::Timestamp,
        DataType::Timestamp(TimeUnit::Microsecond, Some(_)) => PrimitiveType::Timestamptz,
        DataType::Decimal128(precision, scale) if *scale >= 0 => PrimitiveType::Decimal {
            precision: u32::from(*precision),
            scale: *scale as u32,
        },
        // A field first seen only as null: a string column takes whatever comes later best.
        DataType::Null => PrimitiveType::String,
        DataType::Struct(fields) if !fields.is_empty() => {
            let mut children = Vec::with_capacity(fields.len());
            for child in fields {
                let id = next(last_id);
                let child_type = added(child.name(), child.data_type(), last_id)?;
                children.push(Arc::new(NestedField::optional(
                    id,
                    child.name(),
                    child_type,
                )));
            }
            return Ok(Type::Struct(StructType::new(children)));
        }
        DataType::List(element) | DataType::LargeList(element) => {
            let id = next(last_id);
            let element_type = added(name, element.data_type(), last_id)?;
            return Ok(Type::List(ListType::new(Arc::new(
                NestedField::list_element(id, element_type, false),
            ))));
        }
        DataType::Map(entries, _) => {
            let DataType::Struct(pair) = entries.data_type() else {
                return Err(not_addable(name, data_type));
            };
            let [key, value] = pair.iter().collect::<Vec<_>>()[..] else {
                return Err(not_addable(name, data_type));
            };
            let key_id = next(last_id);
            let value_id = next(last_id);
            let key_type = added(name, key.data_type(), last_id)?;
            let value_type = added(name, value.data_type(), last_id)?;
            return Ok(Type::Map(MapType::new(
                Arc::new(NestedField::map_key_element(key_id, key_type)),
                Arc::new(NestedField::map_value_element(value_id, value_type, false)),
            )));
        }
        other => return Err(not_addable(name, other)),
    }))
}

fn not_addable(name: &str, data_type: &DataType) -> floe_catalog::CatalogError {
    floe_catalog::CatalogError::bad_request(format!(
        "field {name:?} is not a column of the table and a {data_type} column cannot be added \
         automatically; add it with a schema update first"
    ))
}

/// `current` evolved to hold values of `seen`, when that changes it: struct fields the
/// values bring are added (optional, ids after `last_id`), list elements and map values are
/// evolved the same way, primitives widened ([`widened_type`]). Fields that cannot be added
/// are left out.
pub fn merged_type(
    current: &iceberg::spec::Type,
    seen: &DataType,
    last_id: &mut i32,
) -> Option<iceberg::spec::Type> {
    use iceberg::spec::{ListType, MapType, NestedField, StructType, Type};
    let evolve = |field: &NestedField, seen: &DataType, last_id: &mut i32| {
        merged_type(&field.field_type, seen, last_id).map(|evolved| {
            let mut field = field.clone();
            field.field_type = Box::new(evolved);
            Arc::new(field)
        })
    };
    match (current, seen) {
        (Type::Struct(current), DataType::Struct(fields)) => {
            let mut children = current.fields().to_vec();
            let mut changed = false;
            for field in fields {
                match children.iter().position(|c| c.name == *field.name()) {
                    Some(i) => {
                        if let Some(evolved) = evolve(&children[i], field.data_type(), last_id) {
                            children[i] = evolved;
                            changed = true;
                        }
                    }
                    None => {
                        let id = *last_id + 1;
                        let mut scratch = id;
                        if let Ok(child) = added(field.name(), field.data_type(), &mut scratch) {
                            *last_id = scratch;
                            children.push(Arc::new(NestedField::optional(id, field.name(), child)));
                            changed = true;
                        }
                    }
                }
            }
            changed.then(|| Type::Struct(StructType::new(children)))
        }
        (Type::List(current), DataType::List(element) | DataType::LargeList(element)) => {
            evolve(&current.element_field, element.data_type(), last_id)
                .map(|element| Type::List(ListType::new(element)))
        }
        (Type::Map(current), DataType::Map(entries, _)) => {
            let DataType::Struct(pair) = entries.data_type() else {
                return None;
            };
            let value = pair.get(1)?;
            evolve(&current.value_field, value.data_type(), last_id)
                .map(|value| Type::Map(MapType::new(current.key_field.clone(), value)))
        }
        (current, seen) => widened_type(current, seen),
    }
}

/// The wider Iceberg type a column of type `current` takes for values of `seen`, when
/// Iceberg allows the promotion: int to long, float to double, a decimal's precision up at
/// the same scale.
pub fn widened_type(current: &iceberg::spec::Type, seen: &DataType) -> Option<iceberg::spec::Type> {
    use iceberg::spec::{PrimitiveType, Type};
    let wider = match (current, seen) {
        (Type::Primitive(PrimitiveType::Int), DataType::Int64) => PrimitiveType::Long,
        (Type::Primitive(PrimitiveType::Float), DataType::Float64) => PrimitiveType::Double,
        (
            Type::Primitive(PrimitiveType::Decimal { precision, scale }),
            DataType::Decimal128(p, s),
        ) if i64::from(*s) == i64::from(*scale) && u32::from(*p) > *precision => {
            PrimitiveType::Decimal {
                precision: u32::from(*p),
                scale: *scale,
            }
        }
        _ => return None,
    };
    Some(Type::Primitive(wider))
}

/// Adds the `additions` the table still lacks as optional columns and evolves the top-level
/// columns named in `evolved` to hold their values there ([`merged_type`]: nested fields
/// added, types widened; others are left as they are) — one schema change, one catalog
/// commit as `caller` (so the caller's privileges apply); returns the table as it then is.
/// A concurrent schema change is met by reading the table again and evolving what still
/// needs it.
pub async fn evolve_columns(
    service: &floe_catalog::service::CatalogService,
    caller: &floe_catalog::governance::authz::Caller,
    warehouse: &str,
    ident: &TableIdent,
    additions: &[Field],
    evolved: &[Field],
) -> floe_catalog::Result<floe_catalog::service::LoadedTable> {
    use iceberg::spec::NestedField;
    let mut attempts = 0;
    loop {
        attempts += 1;
        let loaded = service.load_table(caller, warehouse, ident).await?;
        let metadata = &loaded.metadata;
        let current = metadata.current_schema();
        let missing: Vec<&Field> = additions
            .iter()
            .filter(|f| current.field_by_name(f.name()).is_none())
            .collect();
        let mut fields: Vec<_> = current.as_struct().fields().to_vec();
        let mut next_id = metadata.last_column_id();
        let mut promoted = Vec::new();
        for field in evolved {
            let Some(position) = fields.iter().position(|f| f.name == *field.name()) else {
                continue;
            };
            if let Some(merged) = merged_type(
                &fields[position].field_type,
                field.data_type(),
                &mut next_id,
            ) {
                let mut column = fields[position].as_ref().clone();
                column.field_type = Box::new(merged);
                fields[position] = Arc::new(column);
                promoted.push(field.name().clone());
            }
        }
        if missing.is_empty() && promoted.is_empty() {
            return Ok(loaded);
        }
        for field in &missing {
            next_id += 1;
            let id = next_id;
            let column_type = added_type(field, &mut next_id)?;
            fields.push(Arc::new(NestedField::optional(
                id,
                field.name(),
                column_type,
            )));
        }
        let schema = iceberg::spec::Schema::builder()
            .with_schema_id(current.schema_id() + 1)
            .with_identifier_field_ids(current.identifier_field_ids())
            .with_fields(fields)
            .build()
            .map_err(|e| floe_catalog::CatalogError::bad_request(format!("evolved schema: {e}")))?;
        let request = schema_change(ident, metadata, schema, Vec::new());
        match service.commit_table(caller, warehouse, request).await {
            Ok(committed) => {
                tracing::info!(table = %ident, added = ?missing.iter().map(|f| f.name()).collect::<Vec<_>>(), ?promoted, "evolve columns");
                return Ok(committed);
            }
            Err(floe_catalog::CatalogError::CommitFailed(_)) if attempts < 5 => continue,
            Err(e) => return Err(e),
        }
    }
}

/// The commit that makes `schema` table `ident`'s current schema (with `more` updates in the
/// same commit), on the schema and the last field id `metadata` has: a concurrent schema
/// change refuses it.
pub fn schema_change(
    ident: &TableIdent,
    metadata: &iceberg::spec::TableMetadata,
    schema: iceberg::spec::Schema,
    more: Vec<iceberg::TableUpdate>,
) -> TableCommitRequest {
    use iceberg::{TableRequirement, TableUpdate};
    let mut updates = vec![
        TableUpdate::AddSchema { schema },
        TableUpdate::SetCurrentSchema { schema_id: -1 },
    ];
    updates.extend(more);
    TableCommitRequest {
        ident: ident.clone(),
        requirements: vec![
            TableRequirement::CurrentSchemaIdMatch {
                current_schema_id: metadata.current_schema_id(),
            },
            TableRequirement::LastAssignedFieldIdMatch {
                last_assigned_field_id: metadata.last_column_id(),
            },
        ],
        updates,
    }
}
