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

/// The Iceberg field id of an Arrow field, if it carries one.
pub fn field_id(field: &Field) -> Option<i32> {
    field.metadata().get(FIELD_ID_KEY)?.parse().ok()
}

/// Creates a [`FieldIdAdapter`] per file.
#[derive(Debug, Default)]
pub struct FieldIdAdapterFactory;

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
        if by_id.is_empty() {
            return DefaultPhysicalExprAdapterFactory
                .create(logical_file_schema, physical_file_schema);
        }
        Ok(Arc::new(FieldIdAdapter {
            logical: logical_file_schema,
            physical: physical_file_schema,
            by_id,
        }))
    }
}

/// Rewrites column references of one file's scan; see the module documentation.
#[derive(Debug)]
pub struct FieldIdAdapter {
    logical: SchemaRef,
    physical: SchemaRef,
    by_id: HashMap<i32, usize>,
}

impl FieldIdAdapter {
    fn rewrite_column(&self, column: &Column) -> Result<Option<Arc<dyn PhysicalExpr>>> {
        let Ok(logical) = self.logical.field_with_name(column.name()) else {
            return Ok(None);
        };
        let Some(id) = field_id(logical) else {
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
        let logical = Arc::new(Schema::new(vec![
            with_id("renamed", DataType::Int64, 1),
            with_id("added", DataType::Utf8, 3),
        ]));
        let physical = Arc::new(Schema::new(vec![
            with_id("dropped", DataType::Utf8, 2),
            with_id("original", DataType::Int32, 1),
        ]));
        let adapter = FieldIdAdapterFactory
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
}
