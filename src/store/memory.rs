//! The in-memory implementation of [`KvStore`]: a sorted map per column family behind one lock,
//! ordered bytewise like RocksDB's default comparator. For tests and tools; nothing survives
//! the process.
//!
//! A write batch is applied under the write lock, so readers see all of it or none. A scan
//! copies its pairs out in chunks and visits them without the lock held (a visitor may read the
//! store again); unlike a RocksDB iterator it does not read from one snapshot, so a write
//! committed during a scan may show in its later chunks.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::column::Cf;
use super::error::StoreError;
use super::kv::{KvBatch, KvStore, Op, Visit};

/// Pairs copied out per lock taken by a scan.
const SCAN_CHUNK: usize = 256;

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

/// Column families in memory.
pub struct MemoryKv {
    cfs: RwLock<Vec<Map>>,
}

impl Default for MemoryKv {
    fn default() -> Self {
        Self {
            cfs: RwLock::new(vec![Map::new(); Cf::EVERY.len()]),
        }
    }
}

impl MemoryKv {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key` to `value` in `cf` at once (to prepare a store; writers use a batch).
    pub fn insert(&self, cf: Cf, key: &[u8], value: Vec<u8>) {
        self.write_lock()[cf.index()].insert(key.to_vec(), value);
    }

    // A panic while the lock was held cannot leave a map half-written (a batch is applied by
    // infallible map operations), so a poisoned lock is used as is.
    fn read(&self) -> RwLockReadGuard<'_, Vec<Map>> {
        self.cfs.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write_lock(&self) -> RwLockWriteGuard<'_, Vec<Map>> {
        self.cfs.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Up to [`SCAN_CHUNK`] pairs of `cf` between `lower` and `upper`, copied out, from the
    /// lowest up or (`back`) from the highest down.
    fn chunk(
        &self,
        cf: Cf,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        back: bool,
    ) -> Vec<(Vec<u8>, Vec<u8>)> {
        let cfs = self.read();
        let map = &cfs[cf.index()];
        let pairs = map.range::<[u8], _>((lower, upper));
        let copy = |(k, v): (&Vec<u8>, &Vec<u8>)| (k.clone(), v.clone());
        if back {
            pairs.rev().take(SCAN_CHUNK).map(copy).collect()
        } else {
            pairs.take(SCAN_CHUNK).map(copy).collect()
        }
    }
}

/// True when the range `from..to` holds no key (`BTreeMap::range` refuses a reversed range).
fn empty_range(from: &[u8], to: &[u8]) -> bool {
    from >= to
}

impl KvStore for MemoryKv {
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.read()[cf.index()].get(key).cloned())
    }

    fn contains(&self, cf: Cf, key: &[u8]) -> Result<bool, StoreError> {
        Ok(self.read()[cf.index()].contains_key(key))
    }

    fn multi_get(&self, cf: Cf, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>, StoreError> {
        let cfs = self.read();
        let map = &cfs[cf.index()];
        Ok(keys.iter().map(|k| map.get(k).cloned()).collect())
    }

    fn scan(&self, cf: Cf, prefix: &[u8], from: &[u8], visit: Visit<'_>) -> Result<(), StoreError> {
        let mut lower: Vec<u8> = from.to_vec();
        let mut inclusive = true;
        loop {
            let bound = if inclusive {
                Bound::Included(&lower[..])
            } else {
                Bound::Excluded(&lower[..])
            };
            let chunk = self.chunk(cf, bound, Bound::Unbounded, false);
            let full = chunk.len() == SCAN_CHUNK;
            for (key, value) in &chunk {
                if !key.starts_with(prefix) || !visit(key, value)? {
                    return Ok(());
                }
            }
            match chunk.into_iter().next_back() {
                Some((last, _)) if full => {
                    lower = last;
                    inclusive = false;
                }
                _ => return Ok(()),
            }
        }
    }

    fn scan_back(
        &self,
        cf: Cf,
        prefix: &[u8],
        from: Option<&[u8]>,
        visit: Visit<'_>,
    ) -> Result<(), StoreError> {
        let mut upper: Option<(Vec<u8>, bool)> = from.map(|f| (f.to_vec(), true));
        loop {
            let bound = match &upper {
                None => Bound::Unbounded,
                Some((k, true)) => Bound::Included(&k[..]),
                Some((k, false)) => Bound::Excluded(&k[..]),
            };
            let chunk = self.chunk(cf, Bound::Unbounded, bound, true);
            let full = chunk.len() == SCAN_CHUNK;
            for (key, value) in &chunk {
                if !key.starts_with(prefix) || !visit(key, value)? {
                    return Ok(());
                }
            }
            match chunk.into_iter().next_back() {
                Some((last, _)) if full => upper = Some((last, false)),
                _ => return Ok(()),
            }
        }
    }

    fn write(&self, batch: KvBatch, _sync: bool) -> Result<u64, StoreError> {
        let mut bytes = 0u64;
        let mut cfs = self.write_lock();
        for op in batch.into_ops() {
            match op {
                Op::Put { cf, key, value } => {
                    bytes += (key.len() + value.len()) as u64;
                    cfs[cf.index()].insert(key, value);
                }
                Op::Delete { cf, key } => {
                    bytes += key.len() as u64;
                    cfs[cf.index()].remove(&key);
                }
                Op::DeleteRange { cf, from, to } => {
                    bytes += (from.len() + to.len()) as u64;
                    if empty_range(&from, &to) {
                        continue;
                    }
                    let map = &mut cfs[cf.index()];
                    let doomed: Vec<Vec<u8>> = map
                        .range::<[u8], _>((Bound::Included(&from[..]), Bound::Excluded(&to[..])))
                        .map(|(k, _)| k.clone())
                        .collect();
                    for key in doomed {
                        map.remove(&key);
                    }
                }
            }
        }
        Ok(bytes)
    }

    fn flush(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn compact(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn compact_range(&self, _cf: Cf, _from: &[u8], _to: &[u8]) -> Result<(), StoreError> {
        Ok(())
    }

    fn estimated_keys(&self, cf: Cf) -> Result<u64, StoreError> {
        Ok(self.read()[cf.index()].len() as u64)
    }

    fn live_bytes(&self, _cf: Cf) -> u64 {
        0
    }
}
