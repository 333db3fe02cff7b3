//! The table a door writes to, ready: the caller may write to it, and a table that does not
//! exist yet is created with the door's layout (and its namespace with it) on first write.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::{Schema, SchemaRef};
use floe_catalog::governance::authz::{Caller, Privilege};
use floe_catalog::service::{CatalogService, CreateTable, LoadedTable};
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
    /// Its write order: `column [asc|desc] [nulls first|nulls last]` each ([`sort_field`];
    /// Iceberg's defaults: nulls first ascending, nulls last descending).
    pub order: Vec<String>,
    /// Its table properties (compression, bloom filters).
    pub properties: HashMap<String, String>,
    /// Its key, when it is an upsert table ([`super::upsert`]): columns that become required
    /// identifier fields, with `write.upsert.enabled` set.
    pub key: Vec<String>,
}

/// How a table that does not exist yet comes to be, if at all.
pub enum Creation<'a> {
    /// It does not: the request is refused (not found).
    Never,
    /// With this layout, and its namespace too when that is missing (OpenTelemetry's tables).
    Layout(&'a Layout),
    /// With this layout, in a namespace that must exist (a Kafka pipeline's table, whose
    /// namespace its definition was authorized on).
    InNamespace(&'a Layout),
    /// With the layout `infer` makes (from the request's rows), once the caller's
    /// `create-table` on the namespace is checked, so that nothing is decoded for a caller
    /// who may not create it; the namespace must exist (`?create=true`).
    Inferred(&'a mut (dyn FnMut() -> Result<Layout, IngestError> + Send)),
}

/// Table `ident` of `warehouse` ready to take rows from `caller` ([`ensure_loaded`]): its
/// Arrow schema, field ids kept.
pub async fn ensure(
    catalog: &CatalogService,
    caller: &Caller,
    warehouse: &str,
    ident: &TableIdent,
    creation: Creation<'_>,
) -> Result<SchemaRef, IngestError> {
    let loaded = ensure_loaded(catalog, caller, warehouse, ident, creation).await?;
    table_arrow_schema(loaded.metadata.current_schema())
}

/// Table `ident` of `warehouse` ready to take rows from `caller`, who needs `write-data` on
/// it. A table that does not exist is made as `creation` says, as `caller`, who then needs
/// `create-table` on its namespace (and `create-namespace` for a namespace a layout may
/// create). The table as it then is.
pub async fn ensure_loaded(
    catalog: &CatalogService,
    caller: &Caller,
    warehouse: &str,
    ident: &TableIdent,
    creation: Creation<'_>,
) -> Result<LoadedTable, IngestError> {
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
    // Rows pushed into a table the caller reads under a row or column policy could replace
    // (upsert) or meet rows it may not see: refused, as SQL `INSERT` is.
    let (loaded, policy) = catalog
        .load_table_under_policy(caller, warehouse, ident)
        .await?;
    if policy.is_some() {
        return Err(floe_catalog::CatalogError::PermissionDenied(format!(
            "a row or column policy applies to principal {} on table {ident}: rows are not \
             taken into it from this principal",
            caller.principal.name
        ))
        .into());
    }
    Ok(loaded)
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
        (Ok(()), Creation::Layout(layout) | Creation::InNamespace(layout)) => layout,
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
    let (schema, properties) = keyed_schema(layout)?;
    let partition_spec = if layout.partition.is_empty() {
        None
    } else {
        Some(
            floe_sql::write::partition_spec(&schema, &layout.partition).map_err(|e| {
                IngestError::Invalid(format!(
                    "partitioning: {e} (the columns are: {})",
                    column_names(&schema)
                ))
            })?,
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
                properties,
            },
        )
        .await;
    match created {
        // Another request created it first: theirs is as good.
        Ok(_) | Err(CatalogError::AlreadyExists { .. }) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The Iceberg schema and properties of a new table of `layout`: with a key, its columns are
/// required identifier fields and the table is an upsert table.
fn keyed_schema(
    layout: &Layout,
) -> Result<(iceberg::spec::Schema, HashMap<String, String>), IngestError> {
    let mut properties = layout.properties.clone();
    let mut arrow = layout.schema.as_ref().clone();
    if !layout.key.is_empty() {
        let mut fields: Vec<_> = arrow.fields().iter().map(|f| f.as_ref().clone()).collect();
        for name in &layout.key {
            let field = fields
                .iter_mut()
                .find(|f| f.name() == name)
                .ok_or_else(|| {
                    IngestError::Invalid(format!(
                        "the key names {name:?}, which is not a column (the columns are: {})",
                        layout
                            .schema
                            .fields()
                            .iter()
                            .map(|f| f.name().as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                })?;
            *field = field.clone().with_nullable(false);
        }
        arrow = Schema::new_with_metadata(fields, arrow.metadata().clone());
        properties.insert(super::upsert::UPSERT_PROPERTY.to_string(), "true".into());
    }
    // With a key, its columns (made non-null above) are required; the rest stay optional.
    let schema = if layout.key.is_empty() {
        floe_sql::write::iceberg_schema(&arrow)
    } else {
        floe_sql::write::declared_iceberg_schema(&arrow)
    }
    .map_err(|e| IngestError::Invalid(format!("table layout: {e}")))?;
    if layout.key.is_empty() {
        return Ok((schema, properties));
    }
    let ids: Vec<i32> = layout
        .key
        .iter()
        .filter_map(|name| schema.field_by_name(name).map(|f| f.id))
        .collect();
    let schema = schema
        .into_builder()
        .with_identifier_field_ids(ids)
        .build()
        .map_err(|e| IngestError::Invalid(format!("key {}: {e}", layout.key.join(", "))))?;
    Ok((schema, properties))
}

/// One entry of a write order, `column [asc|desc] [nulls first|nulls last]`: the column,
/// whether descending, and whether nulls come first when it says.
pub fn sort_field(item: &str) -> Result<(String, bool, Option<bool>), IngestError> {
    let words: Vec<String> = item
        .split_whitespace()
        .map(|w| w.to_ascii_lowercase())
        .collect();
    let bad = || {
        IngestError::Invalid(format!(
            "sort entry {item:?}: use `column [asc|desc] [nulls first|nulls last]`"
        ))
    };
    let column = item.split_whitespace().next().ok_or_else(bad)?.to_string();
    let (descending, rest) = match words.get(1).map(String::as_str) {
        Some("asc") => (false, &words[2..]),
        Some("desc") => (true, &words[2..]),
        _ => (false, &words[1..]),
    };
    let nulls_first = match rest {
        [] => None,
        [n, f] if n == "nulls" && f == "first" => Some(true),
        [n, l] if n == "nulls" && l == "last" => Some(false),
        _ => return Err(bad()),
    };
    Ok((column, descending, nulls_first))
}

/// The names of `schema`'s columns, for errors.
pub fn column_names(schema: &iceberg::spec::Schema) -> String {
    schema
        .as_struct()
        .fields()
        .iter()
        .map(|f| f.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The sort order `items` ([`sort_field`] each) describe over `schema` (none when empty).
fn write_order(
    schema: &iceberg::spec::Schema,
    items: &[String],
) -> Result<Option<SortOrder>, IngestError> {
    if items.is_empty() {
        return Ok(None);
    }
    let mut builder = SortOrder::builder();
    builder.with_order_id(1);
    for item in items {
        let (column, descending, nulls_first) = sort_field(item)?;
        let field = schema.field_by_name(&column).ok_or_else(|| {
            IngestError::Invalid(format!(
                "the sort order names {column:?}, which is not a column (the columns are: {})",
                column_names(schema)
            ))
        })?;
        // Iceberg's defaults: nulls first ascending, nulls last descending.
        let nulls_first = nulls_first.unwrap_or(!descending);
        builder.with_sort_field(
            SortField::builder()
                .source_id(field.id)
                .transform(Transform::Identity)
                .direction(if descending {
                    SortDirection::Descending
                } else {
                    SortDirection::Ascending
                })
                .null_order(if nulls_first {
                    NullOrder::First
                } else {
                    NullOrder::Last
                })
                .build(),
        );
    }
    builder
        .build(schema)
        .map(Some)
        .map_err(|e| IngestError::Invalid(format!("sort order: {e}")))
}
