//! The table a door writes to, ready: the caller may write to it, and a table that does not
//! exist yet is created with the door's layout (and its namespace with it) on first write.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::{Schema, SchemaRef};
use floe_catalog::governance::authz::{Caller, Privilege};
use floe_catalog::service::{CatalogService, CreateTable};
use floe_catalog::{CatalogError, ErrorCode};
use iceberg::TableIdent;
use iceberg::spec::{NullOrder, SortDirection, SortField, SortOrder, Transform};

use super::IngestError;
use super::log::table_arrow_schema;

/// What a table created on first write is made of.
#[derive(Debug, Clone)]
pub struct Layout {
    /// Its columns (field ids are given when it is created).
    pub schema: Arc<Schema>,
    /// Its partition fields: a column and its transform.
    pub partition: Vec<(String, Transform)>,
    /// Its write order: columns, ascending, nulls last.
    pub order: Vec<String>,
    /// Its table properties (compression, bloom filters).
    pub properties: HashMap<String, String>,
}

/// How a table that does not exist yet comes to be, if at all.
pub enum Creation<'a> {
    /// It does not: the request is refused (not found).
    Never,
    /// With this layout, and its namespace too when that is missing (OpenTelemetry's tables).
    Layout(&'a Layout),
    /// With the layout `infer` makes (from the request's rows), once the caller's
    /// `create-table` on the namespace is checked, so that nothing is decoded for a caller
    /// who may not create it; the namespace must exist (`?create=true`).
    Inferred(&'a mut (dyn FnMut() -> Result<Layout, IngestError> + Send)),
}

/// Table `ident` of `warehouse` ready to take rows from `caller`, who needs `write-data` on
/// it. A table that does not exist is made as `creation` says, as `caller`, who then needs
/// `create-table` on its namespace (and `create-namespace` for a namespace a layout may
/// create). The table's Arrow schema, field ids kept.
pub async fn ensure(
    catalog: &CatalogService,
    caller: &Caller,
    warehouse: &str,
    ident: &TableIdent,
    creation: Creation<'_>,
) -> Result<SchemaRef, IngestError> {
    let authorized = catalog
        .authorize_table(caller, warehouse, ident, Privilege::WriteData)
        .await;
    match (authorized, creation) {
        (Ok(()), _) => {}
        (Err(e), Creation::Never) => return Err(e.into()),
        (Err(e), creation) if e.code() == ErrorCode::NotFound => {
            create(catalog, caller, warehouse, ident, creation).await?;
            catalog
                .authorize_table(caller, warehouse, ident, Privilege::WriteData)
                .await?;
        }
        (Err(e), _) => return Err(e.into()),
    }
    let loaded = catalog
        .load_table(caller, warehouse, ident)
        .await
        .map_err(IngestError::of_catalog)?;
    table_arrow_schema(loaded.metadata.current_schema()).map_err(IngestError::Invalid)
}

async fn create(
    catalog: &CatalogService,
    caller: &Caller,
    warehouse: &str,
    ident: &TableIdent,
    creation: Creation<'_>,
) -> Result<(), IngestError> {
    let namespace = ident.namespace();
    let may_create = catalog
        .authorize_namespace(caller, warehouse, namespace, Privilege::CreateTable)
        .await;
    let inferred;
    let layout = match (may_create, creation) {
        // `ensure` makes no table it may not; here too, the table stays missing.
        (_, Creation::Never) => return Err(CatalogError::no_such_table(ident).into()),
        (Ok(()), Creation::Layout(layout)) => layout,
        (Ok(()), Creation::Inferred(infer)) => {
            inferred = infer()?;
            &inferred
        }
        (Err(e), Creation::Layout(layout)) if e.code() == ErrorCode::NotFound => {
            match catalog
                .create_namespace(caller, warehouse, namespace, HashMap::new())
                .await
            {
                Ok(_) | Err(CatalogError::AlreadyExists { .. }) => {}
                Err(e) => return Err(e.into()),
            }
            catalog
                .authorize_namespace(caller, warehouse, namespace, Privilege::CreateTable)
                .await?;
            layout
        }
        (Err(e), _) => return Err(e.into()),
    };
    let schema = floe_sql::write::iceberg_schema(&layout.schema)
        .map_err(|e| IngestError::Invalid(format!("table layout: {e}")))?;
    let partition_spec = if layout.partition.is_empty() {
        None
    } else {
        Some(
            floe_sql::write::partition_spec(&schema, &layout.partition)
                .map_err(|e| IngestError::Invalid(format!("table layout: {e}")))?,
        )
    };
    let write_order = write_order(&schema, &layout.order)?;
    let created = catalog
        .create_table(
            caller,
            warehouse,
            namespace,
            CreateTable {
                name: ident.name().to_string(),
                location: None,
                schema,
                partition_spec,
                write_order,
                stage_create: false,
                properties: layout.properties.clone(),
            },
        )
        .await;
    match created {
        // Another request created it first: theirs is as good.
        Ok(_) | Err(CatalogError::AlreadyExists { .. }) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The sort order of `columns`, ascending with nulls last (none when empty).
fn write_order(
    schema: &iceberg::spec::Schema,
    columns: &[String],
) -> Result<Option<SortOrder>, IngestError> {
    if columns.is_empty() {
        return Ok(None);
    }
    let mut builder = SortOrder::builder();
    builder.with_order_id(1);
    for column in columns {
        let field = schema
            .field_by_name(column)
            .ok_or_else(|| IngestError::Invalid(format!("table layout: no column {column}")))?;
        builder.with_sort_field(
            SortField::builder()
                .source_id(field.id)
                .transform(Transform::Identity)
                .direction(SortDirection::Ascending)
                .null_order(NullOrder::Last)
                .build(),
        );
    }
    builder
        .build(schema)
        .map(Some)
        .map_err(|e| IngestError::Invalid(format!("table layout: {e}")))
}
