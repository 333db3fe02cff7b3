//! Reads old data files under the table's current schema by Iceberg field id, not by name.
//!
//! Iceberg writers store each column's field id in the Parquet schema (`PARQUET:field_id`).
//! A column renamed since a file was written keeps its id, a dropped column's id never comes
//! back, and an added column's id is absent from older files. DataFusion's Parquet scan maps
//! columns by name; this adapter rewrites each expression's column references from the
//! table's (logical) schema to the file's (physical) columns by id, casts widened types
//! (`int` → `long`, `float` → `double`, decimal precision), and reads columns a file lacks as
//! nulls. Files without field ids (written by non-Iceberg tools) fall back to names.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::{Field, SchemaRef};
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::common::{Result, ScalarValue};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{CastExpr, Column, Literal};
use datafusion::physical_expr_adapter::{
    DefaultPhysicalExprAdapterFactory, PhysicalExprAdapter, PhysicalExprAdapterFactory,
};

/// The metadata key parquet-rs gives a field's Iceberg id.
pub const FIELD_ID_KEY: &str = "PARQUET:field_id";

/// The key of the Parquet read options' key-value metadata under which a scan's [`FieldIds`]
/// travel with a distributed plan (DataFusion's plan codec carries those options), so that a
/// worker rebuilds the same [`FieldIdAdapterFactory`].
pub const FIELD_IDS_OPTION: &str = "floe.field-ids";

/// The Iceberg field id of an Arrow field, if it carries one (a data file's schema, or the
/// schema Floe writes files with).
pub fn field_id(field: &Field) -> Option<i32> {
    field.metadata().get(FIELD_ID_KEY)?.parse().ok()
}

/// A table schema's top-level columns with their Iceberg field ids, in the schema's order.
///
/// The ids live here, beside the Arrow schema DataFusion plans with, and not in that schema's
/// field metadata: DataFusion 54 merges field metadata differently in its logical and its
/// physical plans (a `UNION ALL` of two tables' columns keeps no id logically and one of them
/// physically), and then refuses the plan ("Physical input schema should be the same as the
/// one converted from logical input schema"). Metadata-free plans cannot disagree.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct FieldIds(Arc<[(String, i32)]>);

impl FieldIds {
    /// The ids of `schema`'s top-level fields.
    pub fn of(schema: &iceberg::spec::Schema) -> Self {
        Self(
            schema
                .as_struct()
                .fields()
                .iter()
                .map(|f| (f.name.clone(), f.id))
                .collect(),
        )
    }

    /// The ids an Arrow schema carries in its fields' metadata.
    pub fn of_arrow(schema: &datafusion::arrow::datatypes::Schema) -> Self {
        Self(
            schema
                .fields()
                .iter()
                .filter_map(|f| Some((f.name().clone(), field_id(f)?)))
                .collect(),
        )
    }

    /// The id of the column named `name`.
    pub fn id_of(&self, name: &str) -> Option<i32> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, id)| *id)
    }

    /// The name of the column with id `id`.
    pub fn name_of(&self, id: i32) -> Option<&str> {
        self.0
            .iter()
            .find(|(_, i)| *i == id)
            .map(|(n, _)| n.as_str())
    }

    /// Each column's name and id, in the schema's order.
    pub fn columns(&self) -> impl Iterator<Item = (&str, i32)> {
        self.0.iter().map(|(name, id)| (name.as_str(), *id))
    }

    /// The position in `schema` of the column with id `id`.
    pub fn position_in(
        &self,
        schema: &datafusion::arrow::datatypes::Schema,
        id: i32,
    ) -> Option<usize> {
        schema.index_of(self.name_of(id)?).ok()
    }

    /// The form they travel in ([`FIELD_IDS_OPTION`]): `id=name` pairs, one per line.
    pub fn encode(&self) -> String {
        self.0
            .iter()
            .map(|(name, id)| format!("{id}={}", name.escape_default()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Reads [`FieldIds::encode`]'s form; `None` when it is not that.
    pub fn decode(text: &str) -> Option<Self> {
        let mut ids = Vec::new();
        for line in text.lines() {
            let (id, name) = line.split_once('=')?;
            ids.push((unescape(name)?, id.parse().ok()?));
        }
        Some(Self(ids.into()))
    }
}

/// The inverse of `str::escape_default` for the escapes it makes.
fn unescape(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next()? {
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            '\\' => out.push('\\'),
            '\'' => out.push('\''),
            '"' => out.push('"'),
            'u' => {
                if chars.next()? != '{' {
                    return None;
                }
                let hex: String = chars.by_ref().take_while(|&c| c != '}').collect();
                out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
            }
            _ => return None,
        }
    }
    Some(out)
}

/// `schema` with no field metadata at any depth: what DataFusion plans with (see
/// [`FieldIds`]).
pub fn without_field_metadata(schema: &datafusion::arrow::datatypes::Schema) -> SchemaRef {
    Arc::new(datafusion::arrow::datatypes::Schema::new_with_metadata(
        schema
            .fields()
            .iter()
            .map(|f| bare_field(f))
            .collect::<Vec<_>>(),
        schema.metadata().clone(),
    ))
}

fn bare_field(field: &Field) -> Field {
    use datafusion::arrow::datatypes::DataType;
    let data_type = match field.data_type() {
        DataType::Struct(children) => {
            DataType::Struct(children.iter().map(|c| Arc::new(bare_field(c))).collect())
        }
        DataType::List(item) => DataType::List(Arc::new(bare_field(item))),
        DataType::LargeList(item) => DataType::LargeList(Arc::new(bare_field(item))),
        DataType::FixedSizeList(item, n) => DataType::FixedSizeList(Arc::new(bare_field(item)), *n),
        DataType::Map(entries, sorted) => DataType::Map(Arc::new(bare_field(entries)), *sorted),
        other => other.clone(),
    };
    field
        .clone()
        .with_data_type(data_type)
        .with_metadata(HashMap::new())
}

/// Creates a [`FieldIdAdapter`] per file.
#[derive(Debug, Default)]
pub struct FieldIdAdapterFactory {
    ids: FieldIds,
}

impl FieldIdAdapterFactory {
    /// Maps columns of the table whose ids are `ids`.
    pub fn new(ids: FieldIds) -> Self {
        Self { ids }
    }
}

impl PhysicalExprAdapterFactory for FieldIdAdapterFactory {
    fn create(
        &self,
        logical_file_schema: SchemaRef,
        physical_file_schema: SchemaRef,
    ) -> Result<Arc<dyn PhysicalExprAdapter>> {
        let by_id: HashMap<i32, usize> = physical_file_schema
            .fields()
            .iter()
            .enumerate()
            .filter_map(|(i, f)| field_id(f).map(|id| (id, i)))
            .collect();
        if by_id.is_empty() || self.ids.0.is_empty() {
            return DefaultPhysicalExprAdapterFactory
                .create(logical_file_schema, physical_file_schema);
        }
        Ok(Arc::new(FieldIdAdapter {
            logical: logical_file_schema,
            physical: physical_file_schema,
            ids: self.ids.clone(),
            by_id,
        }))
    }
}

/// Rewrites column references of one file's scan; see the module documentation.
#[derive(Debug)]
pub struct FieldIdAdapter {
    logical: SchemaRef,
    physical: SchemaRef,
    ids: FieldIds,
    by_id: HashMap<i32, usize>,
}

impl FieldIdAdapter {
    fn rewrite_column(&self, column: &Column) -> Result<Option<Arc<dyn PhysicalExpr>>> {
        let Ok(logical) = self.logical.field_with_name(column.name()) else {
            return Ok(None);
        };
        let Some(id) = self.ids.id_of(column.name()) else {
            return Ok(None);
        };
        match self.by_id.get(&id) {
            Some(&index) => {
                let physical = self.physical.field(index);
                let read: Arc<dyn PhysicalExpr> = Arc::new(Column::new(physical.name(), index));
                if physical.data_type() == logical.data_type() {
                    Ok(Some(read))
                } else {
                    Ok(Some(Arc::new(CastExpr::new(
                        read,
                        logical.data_type().clone(),
                        None,
                    ))))
                }
            }
            // Added after this file was written: null in every row of it.
            None => Ok(Some(Arc::new(Literal::new(ScalarValue::try_from(
                logical.data_type(),
            )?)))),
        }
    }
}

impl PhysicalExprAdapter for FieldIdAdapter {
    fn rewrite(&self, expr: Arc<dyn PhysicalExpr>) -> Result<Arc<dyn PhysicalExpr>> {
        expr.transform(|expr| {
            if let Some(column) = expr.downcast_ref::<Column>()
                && let Some(rewritten) = self.rewrite_column(column)?
            {
                return Ok(Transformed::yes(rewritten));
            }
            Ok(Transformed::no(expr))
        })
        .data()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{DataType, Schema};

    fn with_id(name: &str, data_type: DataType, id: i32) -> Field {
        Field::new(name, data_type, true)
            .with_metadata(HashMap::from([(FIELD_ID_KEY.to_string(), id.to_string())]))
    }

    #[test]
    fn renamed_widened_and_added_columns_map_by_id() {
        // The table's schema as DataFusion plans with it: no metadata; its ids beside it.
        let logical = without_field_metadata(&Schema::new(vec![
            with_id("renamed", DataType::Int64, 1),
            with_id("added", DataType::Utf8, 3),
        ]));
        let ids = FieldIds::of_arrow(&Schema::new(vec![
            with_id("renamed", DataType::Int64, 1),
            with_id("added", DataType::Utf8, 3),
        ]));
        assert!(logical.fields().iter().all(|f| f.metadata().is_empty()));
        let physical = Arc::new(Schema::new(vec![
            with_id("dropped", DataType::Utf8, 2),
            with_id("original", DataType::Int32, 1),
        ]));
        let adapter = FieldIdAdapterFactory::new(ids)
            .create(logical.clone(), physical)
            .unwrap();
        let renamed = adapter
            .rewrite(Arc::new(Column::new("renamed", 0)))
            .unwrap();
        assert_eq!(
            renamed.to_string(),
            "CAST(original@1 AS Int64)",
            "read from the file's column with the same id, widened"
        );
        let added = adapter.rewrite(Arc::new(Column::new("added", 1))).unwrap();
        assert_eq!(added.to_string(), "NULL");
    }

    #[test]
    fn ids_travel_as_text() {
        let ids = FieldIds(
            vec![
                ("plain".to_string(), 1),
                ("with = and \n and ü".to_string(), 42),
            ]
            .into(),
        );
        let back = FieldIds::decode(&ids.encode()).unwrap();
        assert_eq!(back, ids);
        assert_eq!(back.id_of("with = and \n and ü"), Some(42));
        assert_eq!(back.name_of(1), Some("plain"));
        assert!(FieldIds::decode("nonsense").is_none());
    }

    #[test]
    fn nested_metadata_is_dropped_too() {
        let child = with_id("c", DataType::Int32, 7);
        let schema = Schema::new(vec![with_id(
            "s",
            DataType::Struct(vec![Arc::new(child)].into()),
            6,
        )]);
        let bare = without_field_metadata(&schema);
        let DataType::Struct(children) = bare.field(0).data_type() else {
            panic!("a struct")
        };
        assert!(bare.field(0).metadata().is_empty() && children[0].metadata().is_empty());
    }
}
