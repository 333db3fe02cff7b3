//! iceberg-rust's own REST client against a live Floe: create, append through its
//! transaction API, load and read back.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use futures::TryStreamExt;
use iceberg::spec::{DataFileFormat, NestedField, PrimitiveType, Schema, Type};
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, DefaultLocationGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
use iceberg::{Catalog, CatalogBuilder, NamespaceIdent, TableCreation, TableIdent};
use iceberg_catalog_rest::{
    REST_CATALOG_PROP_URI, REST_CATALOG_PROP_WAREHOUSE, RestCatalogBuilder,
};
use parquet::file::properties::WriterProperties;

use crate::harness::{Floe, ROOT_ID, ROOT_SECRET, backends};

async fn append_rows(
    catalog: &dyn Catalog,
    ident: &TableIdent,
    ids: &[i64],
) -> iceberg::table::Table {
    let table = catalog.load_table(ident).await.unwrap();
    let schema = table.metadata().current_schema().clone();
    let location = DefaultLocationGenerator::new(table.metadata()).unwrap();
    let names = DefaultFileNameGenerator::new(
        format!("rust-{}", uuid::Uuid::new_v4().simple()),
        None,
        DataFileFormat::Parquet,
    );
    let parquet = ParquetWriterBuilder::new(WriterProperties::builder().build(), schema.clone());
    let rolling = RollingFileWriterBuilder::new_with_default_file_size(
        parquet,
        table.file_io().clone(),
        location,
        names,
    );
    let mut writer = DataFileWriterBuilder::new(rolling)
        .build(None)
        .await
        .unwrap();
    let arrow_schema = Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema).unwrap());
    let names: Vec<Option<String>> = ids.iter().map(|i| Some(format!("row-{i}"))).collect();
    let batch = RecordBatch::try_new(
        arrow_schema,
        vec![
            Arc::new(Int64Array::from(ids.to_vec())),
            Arc::new(StringArray::from(names)),
        ],
    )
    .unwrap();
    writer.write(batch).await.unwrap();
    let files = writer.close().await.unwrap();
    let tx = Transaction::new(&table);
    let tx = tx.fast_append().add_data_files(files).apply(tx).unwrap();
    tx.commit(catalog).await.unwrap()
}

async fn read_ids(table: &iceberg::table::Table) -> Vec<i64> {
    let batches: Vec<RecordBatch> = table
        .scan()
        .select(["id"])
        .build()
        .unwrap()
        .to_arrow()
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let mut ids: Vec<i64> = batches
        .iter()
        .flat_map(|b| {
            b.column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap()
                .values()
                .to_vec()
        })
        .collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn iceberg_rust_client_creates_appends_and_loads() {
    for backend in backends() {
        let floe = Floe::start(backend).await;
        let catalog = RestCatalogBuilder::default()
            .with_storage_factory(Arc::new(iceberg::io::LocalFsStorageFactory))
            .load(
                "floe",
                HashMap::from([
                    (REST_CATALOG_PROP_URI.to_string(), floe.catalog_uri()),
                    (
                        REST_CATALOG_PROP_WAREHOUSE.to_string(),
                        "default".to_string(),
                    ),
                    ("credential".to_string(), format!("{ROOT_ID}:{ROOT_SECRET}")),
                    (
                        "oauth2-server-uri".to_string(),
                        format!("{}/v1/oauth/tokens", floe.catalog_uri()),
                    ),
                ]),
            )
            .await
            .unwrap();
        let ns = NamespaceIdent::from_strs(["rust", "nested"]).unwrap();
        catalog
            .create_namespace(&NamespaceIdent::new("rust".into()), HashMap::new())
            .await
            .unwrap();
        catalog
            .create_namespace(&ns, HashMap::from([("owner".into(), "rust".into())]))
            .await
            .unwrap();
        assert_eq!(
            catalog.get_namespace(&ns).await.unwrap().properties()["owner"],
            "rust"
        );

        let schema = Schema::builder()
            .with_fields(vec![
                NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::optional(2, "name", Type::Primitive(PrimitiveType::String)).into(),
            ])
            .build()
            .unwrap();
        let creation = TableCreation::builder()
            .name("events".into())
            .schema(schema)
            .build();
        let table = catalog.create_table(&ns, creation).await.unwrap();
        assert!(
            table
                .metadata()
                .location()
                .contains("/warehouse/rust/nested/events-")
        );
        let ident = TableIdent::new(ns.clone(), "events".into());

        append_rows(&catalog, &ident, &[1, 2, 3]).await;
        let table = append_rows(&catalog, &ident, &[4, 5]).await;
        assert_eq!(table.metadata().snapshots().len(), 2);

        let tx = Transaction::new(&table);
        let tx = tx
            .update_table_properties()
            .set("owner".into(), "floe-test".into())
            .apply(tx)
            .unwrap();
        tx.commit(&catalog).await.unwrap();

        let loaded = catalog.load_table(&ident).await.unwrap();
        assert_eq!(loaded.metadata().properties()["owner"], "floe-test");
        assert_eq!(read_ids(&loaded).await, vec![1, 2, 3, 4, 5], "{backend}");
        let listed = catalog.list_tables(&ns).await.unwrap();
        assert_eq!(listed, vec![ident.clone()]);

        let renamed = TableIdent::new(NamespaceIdent::new("rust".into()), "events_v2".into());
        catalog.rename_table(&ident, &renamed).await.unwrap();
        assert!(!catalog.table_exists(&ident).await.unwrap());
        assert_eq!(
            read_ids(&catalog.load_table(&renamed).await.unwrap())
                .await
                .len(),
            5
        );
        catalog.drop_table(&renamed).await.unwrap();
        assert!(!catalog.table_exists(&renamed).await.unwrap());
    }
}
