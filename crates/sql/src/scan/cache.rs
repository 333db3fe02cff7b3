//! Small caches of recently used values, kept across queries.

use std::borrow::Borrow;
use std::sync::{Arc, Mutex};

/// Up to `capacity` values by key, most recently used last; the least recently used goes
/// first. Lookups are linear: for tens to a few hundred entries.
pub(crate) struct Recent<K, V> {
    capacity: usize,
    entries: Mutex<Vec<(K, Arc<V>)>>,
}

impl<K: PartialEq, V> Recent<K, V> {
    pub(crate) const fn new(capacity: usize) -> Self {
        Self {
            capacity,
            entries: Mutex::new(Vec::new()),
        }
    }

    /// The value kept for `key`, which becomes the most recently used.
    pub(crate) fn get<Q>(&self, key: &Q) -> Option<Arc<V>>
    where
        K: Borrow<Q>,
        Q: PartialEq + ?Sized,
    {
        let mut entries = self.entries.lock().expect("cache lock");
        let at = entries.iter().position(|(k, _)| k.borrow() == key)?;
        let entry = entries.remove(at);
        let found = entry.1.clone();
        entries.push(entry);
        Some(found)
    }

    /// Keeps `value` for `key` (replacing what was kept for it).
    pub(crate) fn put(&self, key: K, value: Arc<V>) {
        let mut entries = self.entries.lock().expect("cache lock");
        entries.retain(|(k, _)| *k != key);
        entries.push((key, value));
        if entries.len() > self.capacity {
            entries.remove(0);
        }
    }

    /// Forgets every value kept.
    pub(crate) fn clear(&self) {
        self.entries.lock().expect("cache lock").clear();
    }
}
