//! One evolution step for every door: a table made to take rows with fields it does not
//! have, or values its columns cannot hold as they are.

use datafusion::arrow::datatypes::Field;
use floe_catalog::governance::authz::Caller;
use floe_catalog::service::{CatalogService, LoadedTable};
use iceberg::TableIdent;

use super::IngestError;

/// Table `ident` evolved (as `caller`, whose privileges apply) to take rows of the `seen`
/// top-level fields: fields it lacks become optional columns, fields it has whose values carry
/// more (nested fields, a wider type) widen their columns — one schema change. Fields of a
/// kind no column can hold are left as they are. The table as it then is.
pub async fn evolve(
    catalog: &CatalogService,
    caller: &Caller,
    warehouse: &str,
    ident: &TableIdent,
    seen: &[Field],
) -> Result<LoadedTable, IngestError> {
    let loaded = catalog
        .load_table(caller, warehouse, ident)
        .await
        .map_err(IngestError::of_catalog)?;
    let current = loaded.metadata.current_schema();
    let mut scratch = loaded.metadata.last_column_id();
    let (additions, known): (Vec<Field>, Vec<Field>) = seen
        .iter()
        .cloned()
        .partition(|f| current.field_by_name(f.name()).is_none());
    let widened: Vec<Field> = known
        .into_iter()
        .filter(|f| {
            current.field_by_name(f.name()).is_some_and(|column| {
                floe_sql::write::merged_type(&column.field_type, f.data_type(), &mut scratch)
                    .is_some()
            })
        })
        .collect();
    if additions.is_empty() && widened.is_empty() {
        return Ok(loaded);
    }
    floe_sql::write::evolve_columns(catalog, caller, warehouse, ident, &additions, &widened)
        .await
        .map_err(IngestError::of_catalog)
}
