//! One pack and its index: where an object is, and what its entry's header says.
//!
//! `objects/pack/pack-*.idx` (version 2) starts with `\377tOc` and the version, then a
//! 256-entry fan-out table of cumulative counts by first id byte, the sorted ids, their
//! CRCs, 31-bit offsets whose top bit points into a table of 64-bit ones, and two
//! checksums. A pack (`pack-*.pack`) starts with `PACK`, its version and its object count;
//! an entry is a type-and-size varint header, for deltas the base (a backwards offset in
//! the same pack, or the base's id), then zlib-deflated data.
//!
//! Both files are mapped, as git and gix map them: a lookup is a binary search in memory
//! and an entry is read where it lies, with no system call (positioned reads cost a `pread`
//! per probe and per chunk, ~500 per commit of a history walk). Git writes a pack and its
//! index whole under a temporary name and renames them into place, never changing them
//! after, and a deleted file stays mapped until unmapped; only a file truncated in place
//! under a live mapping (which git never does) could fault. Everything read through the
//! maps is bounds-checked: damaged bytes are `None`, never a panic.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::Mmap;

use crate::object::{ID_LEN, Kind, MAX_OBJECT};

const OFS_DELTA: u8 = 6;
const REF_DELTA: u8 = 7;
/// Where the index's sorted ids start: after the header and the fan-out table.
const IDS_AT: usize = 8 + 256 * 4;
/// A pack starts with `PACK`, a version and an object count.
const PACK_HEADER: usize = 12;

/// Numbers packs for the lifetime of the process, so that what is cached of one pack's
/// entries is never taken for another's.
static SERIAL: AtomicU64 = AtomicU64::new(0);

/// One pack and its index, mapped.
pub(super) struct Pack {
    /// The index file this was opened from: a listing that finds it again keeps this one.
    pub(super) idx_path: PathBuf,
    /// Unique to this open pack (see [`SERIAL`]).
    pub(super) serial: u64,
    idx: Mmap,
    pack: Mmap,
    /// Cumulative object counts by first id byte.
    fanout: [u32; 256],
}

/// What an entry's base is.
pub(super) enum Base {
    /// Not a delta: an object of this kind.
    None(Kind),
    /// An offset delta's base, at this offset of the same pack.
    Offset(u64),
    /// A ref delta's base, by id.
    Id([u8; ID_LEN]),
}

/// A pack entry's header.
pub(super) struct EntryHeader {
    pub(super) base: Base,
    /// The size of the entry's data once inflated (for a delta: of its instructions).
    pub(super) size: usize,
    /// Where the deflated data starts.
    pub(super) data_at: u64,
}

/// A read-only map of the whole of `path`; `None` for an empty or unreadable file.
fn map(path: &Path) -> Option<Mmap> {
    let file = File::open(path).ok()?;
    // SAFETY: the map is read only and lives no longer than `Pack`. Git never changes a
    // pack or an index in place (see the module documentation); a file changed all the
    // same yields other bytes, which every read bounds-checks and the ids catch.
    unsafe { Mmap::map(&file) }.ok()
}

impl Pack {
    pub(super) fn open(idx_path: &Path) -> Option<Pack> {
        let idx = map(idx_path)?;
        let pack = map(&idx_path.with_extension("pack"))?;
        // Version 2 starts with "\377tOc" and the version; version 1 has no header.
        if idx.get(..8)? != [0xff, b't', b'O', b'c', 0, 0, 0, 2] {
            return None;
        }
        let mut fanout = [0u32; 256];
        for (i, count) in fanout.iter_mut().enumerate() {
            *count = be32(idx.get(8 + i * 4..)?)?;
        }
        if fanout.windows(2).any(|w| w[0] > w[1]) {
            return None;
        }
        let count = fanout[255] as usize;
        // Ids, CRCs and small offsets, then (64-bit offsets and) two checksums.
        let tables = count.checked_mul(ID_LEN + 4 + 4)?;
        if idx.len() < IDS_AT.checked_add(tables)?.checked_add(2 * ID_LEN)? {
            return None;
        }
        let header = pack.get(..PACK_HEADER)?;
        if &header[..4] != b"PACK" || be32(&header[8..])? != fanout[255] {
            return None;
        }
        Some(Pack {
            idx_path: idx_path.to_path_buf(),
            serial: SERIAL.fetch_add(1, Ordering::Relaxed),
            idx,
            pack,
            fanout,
        })
    }

    fn count(&self) -> usize {
        self.fanout[255] as usize
    }

    /// The offset in the pack of object `id`: a binary search of the ids whose first byte
    /// is `id`'s (the fan-out table gives their range).
    pub(super) fn find(&self, id: &[u8; ID_LEN]) -> Option<u64> {
        let first = usize::from(id[0]);
        let mut lo = if first == 0 {
            0
        } else {
            self.fanout[first - 1] as usize
        };
        let mut hi = self.fanout[first] as usize;
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let at = IDS_AT + mid * ID_LEN;
            match self.idx.get(at..at + ID_LEN)?.cmp(id.as_slice()) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return self.offset_of(mid),
            }
        }
        None
    }

    /// The pack offset of the `n`th object of the index.
    fn offset_of(&self, n: usize) -> Option<u64> {
        let count = self.count();
        let small_at = IDS_AT + count * (ID_LEN + 4);
        let small = be32(self.idx.get(small_at + n * 4..)?)?;
        if small & 0x8000_0000 == 0 {
            return Some(u64::from(small));
        }
        let large_at = small_at + count * 4 + (small & 0x7fff_ffff) as usize * 8;
        let large = self.idx.get(large_at..large_at.checked_add(8)?)?;
        Some(u64::from_be_bytes(large.try_into().ok()?))
    }

    /// The pack's bytes from `offset` to its end (an entry's data runs on from its header).
    pub(super) fn bytes_from(&self, offset: u64) -> Option<&[u8]> {
        self.pack.get(usize::try_from(offset).ok()?..)
    }

    pub(super) fn entry_header(&self, offset: u64) -> Option<EntryHeader> {
        // Entries follow the pack's header: an offset inside it is a damaged index.
        if offset < PACK_HEADER as u64 {
            return None;
        }
        // Type and size (at most 10 bytes for a 64-bit size), then a base offset (at most
        // 10) or a base id (20).
        let head = self.bytes_from(offset)?;
        let mut at = 0;
        let mut byte = *head.first()?;
        let kind = (byte >> 4) & 7;
        let mut size = u64::from(byte & 15);
        let mut shift = 4;
        while byte & 0x80 != 0 {
            at += 1;
            byte = *head.get(at)?;
            if shift > 56 {
                return None;
            }
            size |= u64::from(byte & 0x7f) << shift;
            shift += 7;
        }
        at += 1;
        let size = usize::try_from(size).ok().filter(|s| *s <= MAX_OBJECT)?;
        let base = match kind {
            1..=4 => Base::None(Kind::from_pack_type(kind)?),
            OFS_DELTA => {
                // Big-endian groups of 7 bits, each continuation adding one (so that every
                // distance has one encoding).
                let mut byte = *head.get(at)?;
                at += 1;
                let mut back = u64::from(byte & 0x7f);
                while byte & 0x80 != 0 {
                    byte = *head.get(at)?;
                    at += 1;
                    back = back.checked_add(1)?.checked_mul(128)? | u64::from(byte & 0x7f);
                }
                Base::Offset(offset.checked_sub(back).filter(|_| back > 0)?)
            }
            REF_DELTA => {
                let id: [u8; ID_LEN] = head.get(at..at + ID_LEN)?.try_into().ok()?;
                at += ID_LEN;
                Base::Id(id)
            }
            _ => return None,
        };
        Some(EntryHeader {
            base,
            size,
            data_at: offset + at as u64,
        })
    }
}

pub(super) fn be32(b: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(..4)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::parse_hex;
    use crate::testing::{commit_all, git};

    /// A pack of many objects whose ids spread over the fan-out table, with ids whose
    /// first byte is 0x00 and 0xff among them; its index path.
    fn packed_repo(dir: &Path) -> PathBuf {
        git(dir, &["init", "-q", "-b", "main"]);
        for i in 0..600 {
            std::fs::write(dir.join(format!("f{i}")), format!("file {i}\n")).unwrap();
        }
        commit_all(dir, "many files");
        git(dir, &["repack", "-adq"]);
        std::fs::read_dir(dir.join(".git/objects/pack"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|e| e == "idx"))
            .unwrap()
    }

    /// Every object of the pack, sorted by id, with its offset, as `git show-index` lists
    /// them.
    fn listed(idx: &Path) -> Vec<([u8; ID_LEN], u64)> {
        let out = std::process::Command::new("git")
            .arg("show-index")
            .stdin(File::open(idx).unwrap())
            .output()
            .unwrap();
        assert!(out.status.success());
        let mut all: Vec<_> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| {
                let mut parts = l.split_whitespace();
                let offset = parts.next().unwrap().parse().unwrap();
                (parse_hex(parts.next().unwrap()).unwrap(), offset)
            })
            .collect();
        all.sort();
        all
    }

    #[test]
    fn lookups_find_every_id_at_the_fanout_edges_and_no_absent_one() {
        let repo = tempfile::tempdir().unwrap();
        let idx = packed_repo(repo.path());
        let pack = Pack::open(&idx).unwrap();
        let all = listed(&idx);
        assert_eq!(all.len(), pack.count());
        // The blobs' ids are fixed: the first and last buckets are not empty.
        assert_eq!(all[0].0[0], 0x00);
        assert_eq!(all[all.len() - 1].0[0], 0xff);
        // Every id, so the first and last of every fan-out bucket and of the index.
        for (id, offset) in &all {
            assert_eq!(pack.find(id), Some(*offset));
        }
        let (first, last) = (all[0].0, all[all.len() - 1].0);
        assert_eq!(pack.find(&first), Some(all[0].1));
        assert_eq!(pack.find(&last), Some(all[all.len() - 1].1));
        // Absent ids: all zeros, all ones, just below and above every present id, and
        // ids in buckets that are empty.
        assert_eq!(pack.find(&[0; ID_LEN]), None);
        assert_eq!(pack.find(&[0xff; ID_LEN]), None);
        for (id, _) in &all {
            for neighbour in [step(id, false), step(id, true)].into_iter().flatten() {
                if all.binary_search_by(|(i, _)| i.cmp(&neighbour)).is_err() {
                    assert_eq!(pack.find(&neighbour), None);
                }
            }
        }
        let empty = (0..=255u8).find(|b| all.iter().all(|(id, _)| id[0] != *b));
        if let Some(b) = empty {
            let mut id = [0x55; ID_LEN];
            id[0] = b;
            assert_eq!(pack.find(&id), None);
        }
    }

    /// The id one above (or below) `id` as a 160-bit number; `None` past either end.
    fn step(id: &[u8; ID_LEN], up: bool) -> Option<[u8; ID_LEN]> {
        let mut next = *id;
        for byte in next.iter_mut().rev() {
            let (value, carry) = if up {
                byte.overflowing_add(1)
            } else {
                byte.overflowing_sub(1)
            };
            *byte = value;
            if !carry {
                return Some(next);
            }
        }
        None
    }

    #[test]
    fn an_index_that_does_not_fit_its_pack_is_refused() {
        let repo = tempfile::tempdir().unwrap();
        let idx = packed_repo(repo.path());
        let good = std::fs::read(&idx).unwrap();
        // Shorter than its tables.
        std::fs::write(&idx, &good[..good.len() - 100]).unwrap();
        assert!(Pack::open(&idx).is_none());
        // Empty.
        std::fs::write(&idx, b"").unwrap();
        assert!(Pack::open(&idx).is_none());
        // A pack whose object count is not the index's.
        std::fs::write(&idx, &good).unwrap();
        let pack_path = idx.with_extension("pack");
        let mut pack = std::fs::read(&pack_path).unwrap();
        pack[11] ^= 1;
        std::fs::write(&pack_path, &pack).unwrap();
        assert!(Pack::open(&idx).is_none());
    }
}
