//! Column names → bind positions, looked up ASCII-case-insensitively without allocating.

use super::VALUE_COLUMN;

/// Maps lower-cased column names to 1-based bind positions of the INSERT statement.
///
/// Lookups are ASCII-case-insensitive (like SQLite's own column names), an exact match is
/// preferred, and they never allocate.
#[derive(Debug, Clone)]
pub(crate) struct ColumnBinder {
    index: CiIndex,
    pub(super) value_pos: Option<usize>,
    /// Wire names of columns named otherwise (`config.snake_case_aliases`), consulted
    /// first; `wire_pos[i]` is the position of `wire.names[i]`.
    wire: CiIndex,
    wire_pos: Vec<usize>,
}

impl ColumnBinder {
    /// `columns[i]` is bound at position i+1. Lookup of a JSON key is case-insensitive
    /// (SQLite column names are), exact match tried first; the hot path is allocation-free.
    /// When a name occurs more than once, its first position wins.
    pub(crate) fn new(columns: &[String]) -> ColumnBinder {
        let mut index = CiIndex::default();
        for column in columns {
            index.push(column);
        }
        let value_pos = index.find(VALUE_COLUMN).map(|i| i + 1);
        ColumnBinder {
            index,
            value_pos,
            wire: CiIndex::default(),
            wire_pos: Vec::new(),
        }
    }

    /// As [`new`](Self::new), with a JSON key equal to a wire name of `wire_names`
    /// (column, wire name) bound to that column, before any column of the key's name.
    pub(crate) fn with_wire_names(
        columns: &[String],
        wire_names: &[(String, String)],
    ) -> ColumnBinder {
        let mut binder = ColumnBinder::new(columns);
        for (column, wire) in wire_names {
            if let Some(i) = columns.iter().position(|c| c.eq_ignore_ascii_case(column)) {
                binder.wire.push(wire);
                binder.wire_pos.push(i + 1);
            }
        }
        binder
    }

    /// The 1-based position of the column named `key` (or whose wire name it is), if any.
    pub(super) fn position(&self, key: &str) -> Option<usize> {
        if !self.wire_pos.is_empty()
            && let Some(i) = self.wire.find(key)
        {
            return self.wire_pos.get(i).copied();
        }
        self.index.find(key).map(|i| i + 1)
    }
}

/// An insertion-ordered list of names with an ASCII-case-insensitive open-addressing hash
/// index over it. [`CiIndex::find`] prefers an exact match, otherwise returns the first
/// case-insensitive one. No allocation on lookup.
#[derive(Debug, Clone, Default)]
pub(super) struct CiIndex {
    pub(super) names: Vec<Box<str>>,
    /// Linear-probing table of (hash, 1 + index into `names`); index 0 marks an empty slot.
    slots: Vec<(u64, usize)>,
    /// Number of occupied slots.
    linked: usize,
}

impl CiIndex {
    pub(super) fn find(&self, key: &str) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let hash = fold_hash(key.as_bytes());
        let mask = self.slots.len() - 1;
        let mut slot = slot_of(hash, mask);
        let mut folded = None;
        loop {
            let (entry_hash, entry) = self.slots.get(slot).copied().unwrap_or((0, 0));
            if entry == 0 {
                return folded;
            }
            let idx = entry - 1;
            if entry_hash == hash
                && let Some(name) = self.names.get(idx)
                && name.len() == key.len()
            {
                if **name == *key {
                    return Some(idx);
                }
                if folded.is_none() && name.eq_ignore_ascii_case(key) {
                    folded = Some(idx);
                }
            }
            slot = (slot + 1) & mask;
        }
    }

    fn find_exact(&self, key: &str) -> Option<usize> {
        self.find(key)
            .filter(|&i| self.names.get(i).is_some_and(|n| **n == *key))
    }

    /// Appends `name`; it is indexed unless the exact same name is already present.
    pub(super) fn push(&mut self, name: &str) {
        let idx = self.names.len();
        let duplicate = self.find_exact(name).is_some();
        self.names.push(name.into());
        if duplicate {
            return;
        }
        if (self.linked + 1) * 2 > self.slots.len() {
            self.grow();
        }
        self.link(idx);
    }

    fn grow(&mut self) {
        let capacity = (self.slots.len() * 2).max(16);
        let mut linked: Vec<usize> = self
            .slots
            .iter()
            .filter(|&&(_, e)| e != 0)
            .map(|&(_, e)| e - 1)
            .collect();
        // Relinking in insertion order keeps "first name wins" among case-insensitive twins.
        linked.sort_unstable();
        self.slots = vec![(0, 0); capacity];
        self.linked = 0;
        for idx in linked {
            self.link(idx);
        }
    }

    fn link(&mut self, idx: usize) {
        let Some(name) = self.names.get(idx) else {
            return;
        };
        let hash = fold_hash(name.as_bytes());
        let mask = self.slots.len() - 1;
        let mut slot = slot_of(hash, mask);
        while let Some(entry) = self.slots.get_mut(slot) {
            if entry.1 == 0 {
                *entry = (hash, idx + 1);
                self.linked += 1;
                return;
            }
            slot = (slot + 1) & mask;
        }
    }
}

/// A hash that is equal for names equal under ASCII case folding: every byte is hashed with
/// its 0x20 bit set (which maps `A`→`a`; the few other bytes it conflates are told apart by
/// the final comparison). Eight bytes at a time, FxHash-style.
fn fold_hash(bytes: &[u8]) -> u64 {
    const SEED: u64 = 0x517c_c1b7_2722_0a95;
    const CASE: u64 = 0x2020_2020_2020_2020;
    let mut hash = bytes.len() as u64;
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0_u8; 8];
        word.copy_from_slice(chunk);
        hash = (hash.rotate_left(5) ^ (u64::from_le_bytes(word) | CASE)).wrapping_mul(SEED);
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        let mut word = [0_u8; 8];
        word[..tail.len()].copy_from_slice(tail);
        hash = (hash.rotate_left(5) ^ (u64::from_le_bytes(word) | CASE)).wrapping_mul(SEED);
    }
    hash
}

fn slot_of(hash: u64, mask: usize) -> usize {
    ((hash >> 32) ^ hash) as usize & mask
}
