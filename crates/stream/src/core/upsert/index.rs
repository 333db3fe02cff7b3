//! The key index of an upsert table: for every live key, the data file and position of its
//! row — what the next version of that key deletes.
//!
//! An index is kept in memory per table, tagged with the table's uuid, its key (field ids, in
//! order) and the snapshot it describes. The node that commits a table's upserts moves its
//! index along with each of its own commits; when the table's `main` or key is anything else
//! (a restart, compaction or another writer committed, a commit lost its race, the key was
//! changed) the index is built again from the table: the key columns of every live data file,
//! less the rows its position deletes and deletion vectors remove
//! ([`floe_sql::scan::IcebergTableProvider::live_keys`]). A lost index costs one read of the
//! key columns, never a wrong answer. A key the table holds more than once (rows another
//! writer appended) keeps every place, and its next change deletes them all.
//!
//! At most [`HELD`] tables' indexes are held; the one used least recently goes first.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use iceberg::spec::Struct;

use crate::core::IngestError;

/// Tables whose indexes are held at once.
pub const HELD: usize = 64;

/// A data file rows of the index lie in.
#[derive(Debug, Clone)]
pub struct Slot {
    pub path: String,
    pub spec_id: i32,
    pub partition: Struct,
}

/// Where a key's live row is: a slot's index and the row's position in that file.
pub type Place = (u32, u64);

/// What an index describes: the table, its key and the snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct Described {
    pub table: uuid::Uuid,
    pub key_ids: Vec<i32>,
    pub types: Vec<DataType>,
    /// `None`: an empty table.
    pub snapshot_id: Option<i64>,
}

pub struct KeyIndex {
    pub described: Described,
    converter: RowConverter,
    slots: Vec<Slot>,
    slot_of: HashMap<String, u32>,
    places: HashMap<Box<[u8]>, Place>,
    /// Further places of keys the table holds more than once.
    duplicates: HashMap<Box<[u8]>, Vec<Place>>,
}

impl KeyIndex {
    /// An empty index of the table and key `described` says.
    pub fn new(described: Described) -> Result<Self, IngestError> {
        let converter = RowConverter::new(
            described
                .types
                .iter()
                .cloned()
                .map(SortField::new)
                .collect(),
        )
        .map_err(|e| IngestError::Invalid(format!("key columns: {e}")))?;
        Ok(Self {
            described,
            converter,
            slots: Vec::new(),
            slot_of: HashMap::new(),
            places: HashMap::new(),
            duplicates: HashMap::new(),
        })
    }

    /// How many keys are live.
    pub fn keys(&self) -> usize {
        self.places.len()
    }

    /// The keys of `columns` (one array per key column, in the key's order), each row's
    /// encoding comparable by bytes.
    pub fn encode(&self, columns: &[ArrayRef]) -> Result<Rows, IngestError> {
        let cast: Vec<ArrayRef> = columns
            .iter()
            .zip(&self.described.types)
            .map(|(column, data_type)| cast(column, data_type))
            .collect::<Result<_, _>>()
            .map_err(|e| IngestError::Invalid(format!("key columns: {e}")))?;
        self.converter
            .convert_columns(&cast)
            .map_err(|e| IngestError::Invalid(format!("key columns: {e}")))
    }

    /// The slot id, data file and position of every live row of `key`.
    pub fn get(&self, key: &[u8]) -> Vec<(u32, &Slot, u64)> {
        let at = |&(slot, position): &Place| (slot, &self.slots[slot as usize], position);
        let mut found: Vec<_> = self.places.get(key).map(at).into_iter().collect();
        if let Some(more) = self.duplicates.get(key) {
            found.extend(more.iter().map(at));
        }
        found
    }

    pub fn remove(&mut self, key: &[u8]) {
        self.places.remove(key);
        self.duplicates.remove(key);
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
            let key: Box<[u8]> = row.as_ref().into();
            if let Some(before) = self.places.insert(key.clone(), (id, position)) {
                self.duplicates.entry(key).or_default().push(before);
            }
        }
        Ok(())
    }
}

/// A table's index as held: empty until first built.
pub type Held = Arc<tokio::sync::Mutex<Option<KeyIndex>>>;

#[derive(Default)]
struct Registry {
    clock: u64,
    held: HashMap<String, (u64, Held)>,
}

static INDEXES: LazyLock<Mutex<Registry>> = LazyLock::new(Mutex::default);

/// The index slot of table `table` (by warehouse and name; its lock orders the upsert commits
/// of that table on this node). An index dropped to make room is built again when used.
pub fn of_table(table: &str) -> Held {
    let mut registry = INDEXES.lock().expect("key index registry lock");
    registry.clock += 1;
    let clock = registry.clock;
    if !registry.held.contains_key(table) && registry.held.len() >= HELD {
        let oldest = registry
            .held
            .iter()
            .min_by_key(|(_, (used, _))| *used)
            .map(|(name, _)| name.clone());
        if let Some(oldest) = oldest {
            registry.held.remove(&oldest);
        }
    }
    let entry = registry
        .held
        .entry(table.to_string())
        .or_insert_with(|| (clock, Held::default()));
    entry.0 = clock;
    entry.1.clone()
}
