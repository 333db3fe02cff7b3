//! The key index of an upsert table: for every live key, the data file and position of its
//! row — what the next version of that key deletes.
//!
//! An index is kept in memory per table (by its uuid), tagged with the snapshot it describes.
//! The node that commits a table's upserts moves its index along with each of its own commits;
//! when the table's `main` is anything else (a restart, compaction or another writer committed,
//! a commit lost its race) the index is built again from the table: the key columns of every
//! live data file, less the rows its position deletes and deletion vectors remove
//! ([`floe_sql::scan::IcebergTableProvider::live_keys`]). A lost index costs one read of the
//! key columns, never a wrong answer.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use iceberg::spec::Struct;

use crate::core::IngestError;

/// A data file rows of the index lie in.
#[derive(Debug, Clone)]
pub struct Slot {
    pub path: String,
    pub spec_id: i32,
    pub partition: Struct,
}

/// Where a key's live row is: a slot's index and the row's position in that file.
pub type Place = (u32, u64);

pub struct KeyIndex {
    /// The snapshot this index describes (`None`: an empty table).
    pub snapshot_id: Option<i64>,
    types: Vec<DataType>,
    converter: RowConverter,
    slots: Vec<Slot>,
    slot_of: HashMap<String, u32>,
    places: HashMap<Box<[u8]>, Place>,
}

impl KeyIndex {
    /// An empty index over keys of `types`.
    pub fn new(types: Vec<DataType>) -> Result<Self, IngestError> {
        let converter = RowConverter::new(types.iter().cloned().map(SortField::new).collect())
            .map_err(|e| IngestError::Invalid(format!("key columns: {e}")))?;
        Ok(Self {
            snapshot_id: None,
            types,
            converter,
            slots: Vec::new(),
            slot_of: HashMap::new(),
            places: HashMap::new(),
        })
    }

    pub fn types(&self) -> &[DataType] {
        &self.types
    }

    /// How many keys are live.
    pub fn keys(&self) -> usize {
        self.places.len()
    }

    /// The keys of `columns` (one array per key column), each row's encoding comparable by
    /// bytes.
    pub fn encode(&self, columns: &[ArrayRef]) -> Result<Rows, IngestError> {
        let cast: Vec<ArrayRef> = columns
            .iter()
            .zip(&self.types)
            .map(|(column, data_type)| cast(column, data_type))
            .collect::<Result<_, _>>()
            .map_err(|e| IngestError::Invalid(format!("key columns: {e}")))?;
        self.converter
            .convert_columns(&cast)
            .map_err(|e| IngestError::Invalid(format!("key columns: {e}")))
    }

    /// The slot id, data file and position of `key`'s live row.
    pub fn get(&self, key: &[u8]) -> Option<(u32, &Slot, u64)> {
        self.places
            .get(key)
            .map(|&(slot, position)| (slot, &self.slots[slot as usize], position))
    }

    pub fn remove(&mut self, key: &[u8]) {
        self.places.remove(key);
    }

    /// Records `keys` as the rows at `positions` of data file `slot`.
    pub fn insert_file(
        &mut self,
        slot: Slot,
        keys: &RecordBatch,
        positions: &[u64],
    ) -> Result<(), IngestError> {
        let rows = self.encode(keys.columns())?;
        let id = match self.slot_of.get(&slot.path) {
            Some(&id) => id,
            None => {
                let id = u32::try_from(self.slots.len())
                    .map_err(|_| IngestError::Invalid("too many data files to index".into()))?;
                self.slot_of.insert(slot.path.clone(), id);
                self.slots.push(slot);
                id
            }
        };
        for (row, &position) in rows.iter().zip(positions) {
            self.places.insert(row.as_ref().into(), (id, position));
        }
        Ok(())
    }
}

/// The indexes of this process, by table uuid; each behind its own lock, which also orders
/// the upsert commits of one table on this node.
static INDEXES: LazyLock<Mutex<HashMap<uuid::Uuid, Held>>> = LazyLock::new(Mutex::default);

/// A table's index as held: empty until first built.
pub type Held = Arc<tokio::sync::Mutex<Option<KeyIndex>>>;

/// The index slot of table `uuid` (empty until first built).
pub fn of_table(uuid: uuid::Uuid) -> Held {
    INDEXES
        .lock()
        .expect("key index registry lock")
        .entry(uuid)
        .or_default()
        .clone()
}

/// Forgets the index of table `uuid` (the next upsert builds it again from the table).
pub fn forget(uuid: uuid::Uuid) {
    INDEXES
        .lock()
        .expect("key index registry lock")
        .remove(&uuid);
}
