use super::*;
use crate::core::dead_letter::{self, Letter};
use crate::core::target::{Creation, Layout, ensure_loaded};
use crate::core::{Match, conform};

impl Pipeline {
    /// The pipeline's target table, if it exists.
    pub(super) async fn load(&self) -> Result<Option<LoadedTable>> {
        self.load_ident(&self.spec.ident()?).await
    }

    /// A table of the pipeline's warehouse, if it exists.
    pub(super) async fn load_ident(&self, ident: &TableIdent) -> Result<Option<LoadedTable>> {
        match self
            .catalog
            .load_table(&Caller::system(), &self.spec.warehouse, ident)
            .await
        {
            Ok(loaded) => Ok(Some(loaded)),
            Err(CatalogError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Appends `batch` with `offsets` in one snapshot, retrying lost races; returns the
    /// number of data files written. The files are written once; a lost race re-reads the
    /// table and commits them again. The table must still say `from` — what this run last
    /// committed — for every partition: if another node committed meanwhile (it took the
    /// pipeline over), this one is fenced and stops. The check and the commit see the same
    /// snapshot (the commit requires `main` unchanged), so two nodes never both commit the
    /// same records.
    pub(super) async fn commit(
        &self,
        rows: Option<RecordBatch>,
        batch: &Batch,
        from: &HashMap<(String, i32), i64>,
        offsets: &HashMap<(String, i32), i64>,
    ) -> Result<usize> {
        // Nothing to write (only dead letters): the offsets move with the next rows.
        let Some(rows) = rows else { return Ok(0) };
        if self.spec.mode == Mode::Append {
            return self
                .append(&self.spec.ident()?, rows, offsets, Some(from))
                .await;
        }
        let upserted = crate::core::upsert::commit(
            &self.catalog,
            &self.sql,
            &Caller::system(),
            &self.spec.warehouse,
            &self.spec.ident()?,
            batch.changes(&rows),
            Some(&self.spec.key),
            |metadata| self.fenced_offsets(metadata, offsets, Some(from)),
        )
        .await?;
        Ok(upserted.files)
    }

    /// The offsets a commit records on the table `metadata` describes: every partition's as
    /// the table says, with `offsets` updated — or fenced when the table no longer says `from`
    /// (another node took the pipeline over).
    fn fenced_offsets(
        &self,
        metadata: &TableMetadata,
        offsets: &HashMap<(String, i32), i64>,
        from: Option<&HashMap<(String, i32), i64>>,
    ) -> std::result::Result<HashMap<String, String>, crate::core::IngestError> {
        let mut merged = self.spec.committed_offsets(metadata);
        if from.is_some_and(|from| {
            from.iter()
                .any(|(partition, offset)| merged.get(partition) != Some(offset))
        }) {
            return Err(crate::core::IngestError::Fenced(self.spec.name.clone()));
        }
        // Every partition's offsets: what the table says, with this run's own updated.
        merged.extend(offsets.iter().map(|(k, v)| (k.clone(), *v)));
        Ok(self.offset_properties(&merged))
    }

    /// Appends `batch` to table `ident` in one snapshot carrying `offsets`, fenced by `from`
    /// when given (see [`Self::commit`]); returns the number of data files written.
    pub(super) async fn append(
        &self,
        ident: &TableIdent,
        batch: RecordBatch,
        offsets: &HashMap<(String, i32), i64>,
        from: Option<&HashMap<(String, i32), i64>>,
    ) -> Result<usize> {
        let appended = crate::core::commit::append(
            &self.catalog,
            &self.sql,
            &Caller::system(),
            &self.spec.warehouse,
            ident,
            batch,
            |metadata| self.fenced_offsets(metadata, offsets, from),
        )
        .await?;
        Ok(appended.files)
    }

    /// Evolves the table to take the batch: fields it lacks (from the records' registry
    /// schemas, else inferred from every row) become optional columns, columns whose values
    /// now carry more (nested fields, a wider type) are evolved. Fields of a kind no column
    /// can hold are left out of the rows and logged.
    pub(super) async fn evolve(&self, batch: &Batch, loaded: &mut LoadedTable) -> Result<()> {
        let mut seen = if batch.fields.is_empty() {
            crate::core::infer::infer_ndjson(&batch.rows).unwrap_or_default()
        } else {
            batch.fields.clone()
        };
        seen.extend(self.metadata_fields());
        match crate::core::evolve::evolve(
            &self.catalog,
            &Caller::system(),
            &self.spec.warehouse,
            &self.spec.ident()?,
            &seen,
        )
        .await
        {
            Ok(evolved) => *loaded = evolved,
            Err(e) => tracing::warn!(pipeline = %self.spec.name, error = %e, "evolve columns"),
        }
        Ok(())
    }

    /// The metadata columns the pipeline keeps.
    pub(super) fn metadata_fields(&self) -> Vec<Field> {
        self.spec
            .metadata_columns
            .iter()
            .map(|c| c.field())
            .collect()
    }

    /// Makes the batch ready to commit: the table exists (created from the records' schema),
    /// new top-level fields have become optional columns, and the rows are decoded into one
    /// batch of the table's schema (metadata columns filled in, sorted by the table's sort
    /// order). Rows that do not fit the table (a text where a number belongs, say) join the
    /// dead letters with the reason; the rest flow on.
    pub(super) async fn prepare(
        &self,
        batch: &mut Batch,
        dead_committed: &HashMap<(String, i32), i64>,
    ) -> Result<Option<RecordBatch>> {
        if batch.rows.is_empty() {
            return Ok(None);
        }
        let mut loaded = match self.load().await? {
            Some(loaded) => loaded,
            None => self.create_table(batch).await?,
        };
        let (mut schema, mut data_schema) = table_schemas(&loaded)?;
        let rows = batch.sources.len();
        // The fast path for JSON: every row decodes strictly (no field the table lacks, every
        // value of its column's type) into the table as it is.
        let metadata_present = self
            .metadata_fields()
            .iter()
            .all(|f| schema.field_with_name(f.name()).is_ok());
        let fast = if batch.fields.is_empty() && metadata_present {
            decode(&batch.rows, &data_schema, true)
                .ok()
                .filter(|d| d.num_rows() == rows)
        } else {
            None
        };
        let whole = match fast {
            Some(decoded) => Some(decoded),
            None => {
                self.evolve(batch, &mut loaded).await?;
                (schema, data_schema) = table_schemas(&loaded)?;
                decode(&batch.rows, &data_schema, false)
                    .ok()
                    .filter(|d| d.num_rows() == rows)
            }
        };
        let (decoded, kept) = match whole {
            Some(decoded) => (decoded, (0..rows).collect::<Vec<_>>()),
            None => {
                // Some row does not fit: decode row by row and dead-letter the misfits.
                let mut parts = Vec::new();
                let mut kept = Vec::new();
                let mut start = 0;
                let ends = std::mem::take(&mut batch.ends);
                for (i, end) in ends.iter().enumerate() {
                    let row = &batch.rows[start..*end];
                    start = *end;
                    let decoded = decode(row, &data_schema, false).and_then(|d| {
                        if d.num_rows() == 1 {
                            Ok(d)
                        } else {
                            Err(table_error(
                                "a record",
                                format!("holds {} rows, not one", d.num_rows()),
                            ))
                        }
                    });
                    match decoded {
                        Ok(decoded) => {
                            parts.push(decoded);
                            kept.push(i);
                        }
                        Err(e) => {
                            let source = &batch.sources[i];
                            let letter = DeadLetter {
                                topic: source.topic.clone(),
                                partition: source.partition,
                                offset: source.offset,
                                timestamp_ms: source.timestamp_ms,
                                key: source.key.clone(),
                                // The bytes received; a tombstone's key is no value.
                                value: match (&source.original, batch.deletes[i]) {
                                    (Some(original), _) => Some(original.clone()),
                                    (None, true) => None,
                                    (None, false) => {
                                        Some(row.strip_suffix(b"\n").unwrap_or(row).to_vec())
                                    }
                                },
                                error: crate::format::object_error(row).map_or_else(
                                    || format!("does not fit the table: {e}"),
                                    |refusal| refusal.to_string(),
                                ),
                            };
                            batch.reject(letter, dead_committed);
                        }
                    }
                }
                batch.ends = ends;
                let decoded = datafusion::arrow::compute::concat_batches(&data_schema, &parts)
                    .map_err(|e| table_error("decode records", e))?;
                (decoded, kept)
            }
        };
        batch.kept = kept.clone();
        if kept.is_empty() {
            return Ok(None);
        }
        let assembled = assemble(&schema, &decoded, &kept, &batch.sources)?;
        Ok(Some(assembled))
    }

    /// The summary entries recording `offsets`.
    pub(super) fn offset_properties(
        &self,
        offsets: &HashMap<(String, i32), i64>,
    ) -> HashMap<String, String> {
        offsets
            .iter()
            .map(|((topic, partition), offset)| {
                (self.spec.offset_key(topic, *partition), offset.to_string())
            })
            .collect()
    }

    /// Table `ident` made with `layout` on first write (in its namespace, which must exist),
    /// by the one place every door makes its tables ([`crate::core::target::ensure`]), as the
    /// system (a pipeline acts for the catalog that defined it); the table as it then is.
    pub(super) async fn create(&self, ident: &TableIdent, layout: &Layout) -> Result<LoadedTable> {
        Ok(ensure_loaded(
            &self.catalog,
            &Caller::system(),
            &self.spec.warehouse,
            ident,
            Creation::InNamespace(layout),
        )
        .await?)
    }

    /// The dead-letter table of the pipeline's target ([`dead_letter`]).
    pub(super) fn dead_letter_ident(&self) -> Result<TableIdent> {
        Ok(dead_letter::ident_of(&self.spec.ident()?))
    }

    pub(super) async fn load_dead_letters(&self) -> Result<Option<LoadedTable>> {
        self.load_ident(&self.dead_letter_ident()?).await
    }

    /// Appends dead letters to the target's dead-letter table (made on first use, upgraded
    /// from the earlier form) with the batch's offsets.
    pub(super) async fn commit_dead_letters(
        &self,
        dead: &[DeadLetter],
        offsets: &HashMap<(String, i32), i64>,
    ) -> Result<()> {
        let (ident, schema) = dead_letter::ready(
            &self.catalog,
            &Caller::system(),
            &self.spec.warehouse,
            &self.spec.ident()?,
        )
        .await?;
        let letters: Vec<Letter> = dead.iter().map(|d| d.letter(&self.spec.name)).collect();
        let batch = dead_letter::batch(&letters, floe_catalog::clock::now_micros());
        let batch =
            conform(&batch, &schema, Match::Name).map_err(|e| table_error("dead letters", e))?;
        self.append(&ident, batch, offsets, None).await?;
        Ok(())
    }

    /// Creates the target table with the schema the batch's records give (their registry
    /// schema, else inferred from the first rows), the metadata columns, and the spec's
    /// partition spec and sort order.
    pub(super) async fn create_table(&self, batch: &Batch) -> Result<LoadedTable> {
        let mut fields = if batch.fields.is_empty() {
            crate::core::infer::infer_ndjson(first_lines(&batch.rows, 1000))
                .map_err(|e| table_error("infer the table schema", e))?
        } else {
            batch.fields.clone()
        };
        fields.extend(self.metadata_fields());
        let mut partition = Vec::new();
        for item in &self.spec.partition_by {
            partition.push(
                floe_sql::write::partition_field(item)
                    .map_err(|e| StreamError::Invalid(format!("partition-by: {e}")))?,
            );
        }
        let layout = Layout {
            schema: Arc::new(Schema::new(fields)),
            partition,
            order: self.spec.sort_by.clone(),
            properties: HashMap::new(),
            // An upsert or Debezium pipeline's table is an upsert table with the spec's key.
            key: self.spec.key.clone(),
        };
        self.create(&self.spec.ident()?, &layout).await
    }
}

/// The table's Arrow schema, and the part of it records fill (all but metadata columns).
pub(super) fn table_schemas(loaded: &LoadedTable) -> Result<(SchemaRef, SchemaRef)> {
    let schema: SchemaRef = Arc::new(
        iceberg::arrow::schema_to_arrow_schema(loaded.metadata.current_schema())
            .map_err(|e| table_error("table schema", e))?,
    );
    let data_schema = Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .filter(|f| MetadataColumn::of_column(f.name()).is_none())
            .cloned()
            .collect::<Vec<_>>(),
    ));
    Ok((schema, data_schema))
}
