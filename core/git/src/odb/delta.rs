//! Git's delta format: how a pack stores an object as changes to another one.
//!
//! A delta starts with two sizes (the base's and the result's, little-endian groups of 7
//! bits), then a list of instructions: "copy this range of the base" (an op with its top
//! bit set; its low bits say which of 4 offset bytes and 3 size bytes follow, a size of 0
//! meaning 0x10000) and "insert the next `op` bytes" (an op of 1–127). Op 0 is reserved.
//! Anything out of range is `None`, never a panic: the bytes come from files on disk.

use crate::object::MAX_OBJECT;

/// `base` changed by the delta `delta` (see the module documentation).
pub(super) fn apply_delta(base: &[u8], delta: &[u8]) -> Option<Vec<u8>> {
    let (base_size, mut at) = delta_size(delta, 0)?;
    if base_size != base.len() {
        return None;
    }
    let (size, next) = delta_size(delta, at)?;
    at = next;
    if size > MAX_OBJECT {
        return None;
    }
    let mut out = Vec::with_capacity(size);
    while at < delta.len() {
        let op = delta[at];
        at += 1;
        if op & 0x80 != 0 {
            // Copy: which of 4 offset bytes and 3 size bytes follow is in the op's low bits.
            let mut from = 0usize;
            for bit in 0..4 {
                if op & (1 << bit) != 0 {
                    from |= usize::from(*delta.get(at)?) << (8 * bit);
                    at += 1;
                }
            }
            let mut len = 0usize;
            for bit in 0..3 {
                if op & (0x10 << bit) != 0 {
                    len |= usize::from(*delta.get(at)?) << (8 * bit);
                    at += 1;
                }
            }
            if len == 0 {
                len = 0x10000;
            }
            out.extend_from_slice(base.get(from..from.checked_add(len)?)?);
        } else if op != 0 {
            // Insert the next `op` bytes.
            let len = usize::from(op);
            out.extend_from_slice(delta.get(at..at + len)?);
            at += len;
        } else {
            return None;
        }
        if out.len() > size {
            return None;
        }
    }
    (out.len() == size).then_some(out)
}

/// A delta's size field: little-endian groups of 7 bits.
pub(super) fn delta_size(delta: &[u8], mut at: usize) -> Option<(usize, usize)> {
    let mut size = 0usize;
    let mut shift = 0;
    loop {
        let byte = *delta.get(at)?;
        at += 1;
        if shift > 56 {
            return None;
        }
        size |= usize::from(byte & 0x7f) << shift;
        shift += 7;
        if byte & 0x80 == 0 {
            return Some((size, at));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_are_applied_by_the_rules() {
        let base = b"0123456789";
        // Sizes 10 → 6: copy 4 bytes from offset 2, insert "xy".
        let delta = [10, 6, 0x80 | 0x01 | 0x10, 2, 4, 2, b'x', b'y'];
        assert_eq!(apply_delta(base, &delta).unwrap(), b"2345xy");
        // The base size must match.
        assert_eq!(apply_delta(b"short", &delta), None);
        // The result must have the size announced.
        assert_eq!(apply_delta(base, &[10, 7, 0x91, 2, 4, 2, b'x', b'y']), None);
        // A copy out of the base, the reserved op 0, an insert past the end.
        assert_eq!(apply_delta(base, &[10, 4, 0x91, 8, 4]), None);
        assert_eq!(apply_delta(base, &[10, 1, 0]), None);
        assert_eq!(apply_delta(base, &[10, 3, 3, b'a']), None);
        // A copy of size 0 means 0x10000 bytes.
        let big = vec![7u8; 0x10000];
        let delta = [0x80, 0x80, 0x04, 0x80, 0x80, 0x04, 0x80];
        assert_eq!(apply_delta(&big, &delta).unwrap(), big);
        // Sizes that do not end, or overflow.
        assert_eq!(delta_size(&[0x80, 0x80], 0), None);
        assert_eq!(delta_size(&[0xff; 12], 0), None);
    }
}
