//! The key index of an upsert table: for every live key, the data file and position of its
//! row — what the next version of that key deletes.
//!
//! An index is kept in memory per table, tagged with the table's uuid, its key (field ids, in
//! order, and types) and the snapshot it describes. The node that commits a table's upserts
//! moves its index along with each of its own commits; when the table's `main` is anything
//! else the index is made ready again ([`super::ready`]): caught up from the snapshot it
//! describes (or from the table's checkpoint after a restart, [`super::checkpoint`]) when that
//! snapshot is on `main`'s line, else built from the table — the key columns of every live
//! data file, less the rows its position deletes and deletion vectors remove
//! ([`floe_sql::scan::IcebergTableProvider::live_keys`]). A lost index costs one read of the
//! key columns, never a wrong answer. A key the table holds more than once (rows another
//! writer appended) keeps every place, and its next change deletes them all.
//!
//! At most [`HELD`] tables' indexes are held; the one used least recently goes first.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use floe_sql::scan::RoaringTreemap;
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

impl Described {
    /// Whether `other` describes the same table and key (at any snapshot).
    pub fn same_table(&self, other: &Described) -> bool {
        (self.table, &self.key_ids, &self.types) == (other.table, &other.key_ids, &other.types)
    }
}

pub struct KeyIndex {
    pub described: Described,
    converter: RowConverter,
    /// Data files by slot id; a file no longer indexed keeps its id with an empty path.
    pub(super) slots: Vec<Slot>,
    pub(super) slot_of: HashMap<String, u32>,
    pub(super) places: HashMap<Box<[u8]>, Place>,
    /// Further places of keys the table holds more than once.
    pub(super) duplicates: HashMap<Box<[u8]>, Vec<Place>>,
    /// When this node last wrote the index's checkpoint ([`super::checkpoint`]).
    pub checkpointed: Option<std::time::Instant>,
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
            checkpointed: None,
        })
    }

    /// The data files indexed.
    pub fn files(&self) -> impl Iterator<Item = &str> {
        self.slot_of.keys().map(String::as_str)
    }

    /// Says where data file `path` lies (its spec and partition), when it is indexed.
    pub fn locate(&mut self, path: &str, spec_id: i32, partition: &Struct) {
        if let Some(&id) = self.slot_of.get(path) {
            let slot = &mut self.slots[id as usize];
            slot.spec_id = spec_id;
            slot.partition = partition.clone();
        }
    }

    /// Forgets data files `paths` and every place in them (the files left the table).
    pub fn forget_files(&mut self, paths: &HashSet<String>) {
        let mut gone = HashSet::new();
        for path in paths {
            if let Some(id) = self.slot_of.remove(path) {
                self.slots[id as usize].path = String::new();
                gone.insert(id);
            }
        }
        if !gone.is_empty() {
            self.retain(|(slot, _)| !gone.contains(slot));
        }
    }

    /// Forgets the places `deleted` names (positions by data file): rows deleted since.
    pub fn forget_positions(&mut self, deleted: &HashMap<String, RoaringTreemap>) {
        let by_slot: HashMap<u32, &RoaringTreemap> = deleted
            .iter()
            .filter_map(|(path, positions)| Some((*self.slot_of.get(path)?, positions)))
            .collect();
        if !by_slot.is_empty() {
            self.retain(|(slot, position)| {
                by_slot
                    .get(slot)
                    .is_none_or(|positions| !positions.contains(*position))
            });
        }
    }

    /// Forgets places at or beyond the row count `rows` gives their file (a checkpoint's
    /// positions no file holds).
    pub fn forget_beyond(&mut self, rows: &HashMap<String, u64>) {
        let mut most = vec![u64::MAX; self.slots.len()];
        for (path, &count) in rows {
            if let Some(&id) = self.slot_of.get(path) {
                most[id as usize] = count;
            }
        }
        self.retain(|&(slot, position)| position < most[slot as usize]);
    }

    /// Keeps only the places `keep` says yes to; a key left with none is no longer live.
    fn retain(&mut self, keep: impl Fn(&Place) -> bool) {
        let Self {
            places, duplicates, ..
        } = self;
        let mut dead = Vec::new();
        for (key, place) in places.iter_mut() {
            let more = duplicates.get_mut(key);
            if let Some(more) = more {
                more.retain(&keep);
                if !keep(place) {
                    match more.pop() {
                        Some(next) => *place = next,
                        None => dead.push(key.clone()),
                    }
                }
            } else if !keep(place) {
                dead.push(key.clone());
            }
        }
        for key in dead {
            places.remove(&key);
        }
        duplicates.retain(|_, more| !more.is_empty());
    }

    /// Every place, with its key (a key the table holds more than once, once per place).
    pub(super) fn entries(&self) -> impl Iterator<Item = (&[u8], Place)> {
        let first = self
            .places
            .iter()
            .map(|(key, &place)| (key.as_ref(), place));
        let more = self
            .duplicates
            .iter()
            .flat_map(|(key, places)| places.iter().map(move |&place| (key.as_ref(), place)));
        first.chain(more)
    }

    /// Records `key` at `place` (of a slot already added: [`Self::add_slot`]).
    pub(super) fn insert(&mut self, key: Box<[u8]>, place: Place) {
        if let Some(before) = self.places.insert(key.clone(), place) {
            self.duplicates.entry(key).or_default().push(before);
        }
    }

    /// The slot id of data file `slot`, added when new.
    pub(super) fn add_slot(&mut self, slot: Slot) -> Result<u32, IngestError> {
        if let Some(&id) = self.slot_of.get(&slot.path) {
            return Ok(id);
        }
        let id = u32::try_from(self.slots.len())
            .map_err(|_| IngestError::Invalid("too many data files to index".into()))?;
        self.slot_of.insert(slot.path.clone(), id);
        self.slots.push(slot);
        Ok(id)
    }

    /// The encoding of fixed values of the key's types (none for types no fixed value casts
    /// to): a checkpoint written by a build whose Arrow encodes rows otherwise does not match
    /// it, and is not read ([`super::checkpoint`]).
    pub fn probe(&self) -> Option<Vec<u8>> {
        use datafusion::arrow::array::{Int64Array, StringArray};
        let numbers: ArrayRef = Arc::new(Int64Array::from(vec![0, 1, -1, 1_234_567]));
        let texts: ArrayRef = Arc::new(StringArray::from(vec!["0", "1", "-1", "1234567"]));
        let columns = self
            .described
            .types
            .iter()
            .map(|t| cast(&numbers, t).or_else(|_| cast(&texts, t)).ok())
            .collect::<Option<Vec<_>>>()?;
        let rows = self.converter.convert_columns(&columns).ok()?;
        Some(rows.iter().flat_map(|row| row.as_ref().to_vec()).collect())
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

    /// Records the live rows read of data files ([`floe_sql::scan::FileKeys`]).
    pub fn insert_read(&mut self, files: Vec<floe_sql::scan::FileKeys>) -> Result<(), IngestError> {
        for file in files {
            let slot = Slot {
                path: file.data_file,
                spec_id: file.spec_id,
                partition: file.partition,
            };
            self.insert_file(slot, &file.keys, &file.positions)?;
        }
        Ok(())
    }

    /// Records `keys` as the rows at `positions` of data file `slot`.
    pub fn insert_file(
        &mut self,
        slot: Slot,
        keys: &RecordBatch,
        positions: &[u64],
    ) -> Result<(), IngestError> {
        let rows = self.encode(keys.columns())?;
        let id = self.add_slot(slot)?;
        for (row, &position) in rows.iter().zip(positions) {
            self.insert(row.as_ref().into(), (id, position));
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

/// How this node's key indexes came to describe their tables' snapshots: built from a
/// table's rows, loaded from its checkpoint (then caught up), or caught up from the snapshot
/// held.
#[derive(Debug, Default)]
pub struct Readied {
    pub built: AtomicU64,
    pub loaded: AtomicU64,
    pub caught_up: AtomicU64,
}

pub static READIED: Readied = Readied {
    built: AtomicU64::new(0),
    loaded: AtomicU64::new(0),
    caught_up: AtomicU64::new(0),
};

/// [`READIED`] in Prometheus text.
pub fn render_metrics() -> String {
    let name = "floe_upsert_key_indexes_total";
    let mut text = format!(
        "# HELP {name} Upsert key indexes made ready, by how: built from the table's rows, \
         loaded from its checkpoint, caught up from a snapshot held\n# TYPE {name} counter\n"
    );
    for (how, count) in [
        ("built", &READIED.built),
        ("loaded", &READIED.loaded),
        ("caught-up", &READIED.caught_up),
    ] {
        text.push_str(&format!(
            "{name}{{how=\"{how}\"}} {}\n",
            count.load(Ordering::Relaxed)
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::{Field, Schema};

    use super::*;

    fn index_of(files: &[(&str, &[i64])]) -> KeyIndex {
        let mut index = KeyIndex::new(Described {
            table: uuid::Uuid::nil(),
            key_ids: vec![1],
            types: vec![DataType::Int64],
            snapshot_id: None,
        })
        .unwrap();
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        for (path, ids) in files {
            let column: ArrayRef = Arc::new(Int64Array::from(ids.to_vec()));
            let keys = RecordBatch::try_new(schema.clone(), vec![column]).unwrap();
            let positions: Vec<u64> = (0..ids.len() as u64).collect();
            let slot = Slot {
                path: path.to_string(),
                spec_id: 0,
                partition: Struct::empty(),
            };
            index.insert_file(slot, &keys, &positions).unwrap();
        }
        index
    }

    fn places_of(index: &KeyIndex, id: i64) -> Vec<(String, u64)> {
        let column: ArrayRef = Arc::new(Int64Array::from(vec![id]));
        let rows = index.encode(&[column]).unwrap();
        let mut found: Vec<_> = index
            .get(rows.row(0).as_ref())
            .into_iter()
            .map(|(_, slot, position)| (slot.path.clone(), position))
            .collect();
        found.sort();
        found
    }

    #[test]
    fn deleted_positions_and_gone_files_take_only_their_places() {
        // Key 2 is held twice (a.parquet row 1, b.parquet row 0); key 3 once.
        let mut index = index_of(&[("a.parquet", &[1, 2, 3]), ("b.parquet", &[2, 4])]);
        assert_eq!(index.keys(), 4);
        let mut deleted = RoaringTreemap::new();
        deleted.insert(1);
        index.forget_positions(&[("a.parquet".to_string(), deleted)].into_iter().collect());
        assert_eq!(places_of(&index, 2), [("b.parquet".to_string(), 0)]);
        assert_eq!(places_of(&index, 1), [("a.parquet".to_string(), 0)]);
        // A position deleted in a file the index does not hold changes nothing.
        let mut elsewhere = RoaringTreemap::new();
        elsewhere.insert(0);
        index.forget_positions(&[("c.parquet".to_string(), elsewhere)].into_iter().collect());
        assert_eq!(index.keys(), 4);
        index.forget_files(&["b.parquet".to_string()].into_iter().collect());
        assert!(places_of(&index, 2).is_empty());
        assert!(places_of(&index, 4).is_empty());
        assert_eq!(index.keys(), 2);
        assert_eq!(index.files().collect::<Vec<_>>(), ["a.parquet"]);
    }
}
