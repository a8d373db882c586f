//! One pack and its index: where an object is, and what its entry's header says.
//!
//! `objects/pack/pack-*.idx` (version 2) starts with `\377tOc` and the version, then a
//! 256-entry fan-out table of cumulative counts by first id byte, the sorted ids, their
//! CRCs, and 31-bit offsets whose top bit points into a table of 64-bit ones. A pack entry
//! (in `pack-*.pack`) is a type-and-size varint header, for deltas the base (a backwards
//! offset in the same pack, or the base's id), then zlib-deflated data. Both files are read
//! with positioned reads, never mapped: a truncated file is a short read, not a signal.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::inflate::read_at_most;
use crate::object::{ID_LEN, Kind, MAX_OBJECT};

const OFS_DELTA: u8 = 6;
const REF_DELTA: u8 = 7;

/// One pack and its index, open.
pub(super) struct Pack {
    idx: File,
    pub(super) pack: File,
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

impl Pack {
    pub(super) fn open(idx_path: &Path) -> Option<Pack> {
        let idx = File::open(idx_path).ok()?;
        let pack = File::open(idx_path.with_extension("pack")).ok()?;
        let mut head = [0u8; 8 + 256 * 4];
        idx.read_exact_at(&mut head, 0).ok()?;
        // Version 2 starts with "\377tOc" and the version; version 1 has no header.
        if head[..8] != [0xff, b't', b'O', b'c', 0, 0, 0, 2] {
            return None;
        }
        let mut fanout = [0u32; 256];
        for (i, count) in fanout.iter_mut().enumerate() {
            *count = be32(&head[8 + i * 4..])?;
        }
        if fanout.windows(2).any(|w| w[0] > w[1]) {
            return None;
        }
        Some(Pack { idx, pack, fanout })
    }

    fn count(&self) -> u64 {
        u64::from(self.fanout[255])
    }

    /// The offset in the pack of object `id`, by binary search of the index's sorted ids.
    pub(super) fn find(&self, id: &[u8; ID_LEN]) -> Option<u64> {
        let first = usize::from(id[0]);
        let mut lo = if first == 0 {
            0
        } else {
            u64::from(self.fanout[first - 1])
        };
        let mut hi = u64::from(self.fanout[first]);
        let ids_at = 8 + 256 * 4;
        let mut probe = [0u8; ID_LEN];
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            self.idx
                .read_exact_at(&mut probe, ids_at + mid * ID_LEN as u64)
                .ok()?;
            match probe.cmp(id) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return self.offset_of(mid),
            }
        }
        None
    }

    /// The pack offset of the `n`th object of the index.
    fn offset_of(&self, n: u64) -> Option<u64> {
        let count = self.count();
        let small_at = 8 + 256 * 4 + count * (ID_LEN as u64 + 4);
        let mut word = [0u8; 4];
        self.idx.read_exact_at(&mut word, small_at + n * 4).ok()?;
        let small = u32::from_be_bytes(word);
        if small & 0x8000_0000 == 0 {
            return Some(u64::from(small));
        }
        let large_at = small_at + count * 4 + u64::from(small & 0x7fff_ffff) * 8;
        let mut large = [0u8; 8];
        self.idx.read_exact_at(&mut large, large_at).ok()?;
        Some(u64::from_be_bytes(large))
    }

    pub(super) fn entry_header(&self, offset: u64) -> Option<EntryHeader> {
        // Type and size (at most 10 bytes for a 64-bit size), then a base offset (at most
        // 10) or a base id (20).
        let mut head = [0u8; 32];
        let n = read_at_most(&self.pack, &mut head, offset)?;
        let head = &head[..n];
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
