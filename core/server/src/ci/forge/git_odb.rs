//! Reading git objects from the repository's own files, without asking a `git` process.
//!
//! Why: a push hook reads four objects (the commit, its tree, the parent's tree, the config
//! blob). Through the `cat-file --batch` pipe (`git_objects.rs`) each is a round trip to
//! another process: a write, a wake-up of git, its lookup, a wake-up of ours, ~0.2 ms and a
//! share of git's CPU per object, most of a hook's time in git. Read in place, an object
//! costs a few microseconds.
//!
//! What is read:
//!
//! - **Loose objects**: `objects/<2 hex>/<38 hex>`, zlib-deflated `<type> SP <size> NUL
//!   <content>`.
//! - **Packs**: `objects/pack/pack-*.idx` (version 2: a 256-entry fan-out table of
//!   cumulative counts by first id byte, the sorted ids, their CRCs, 31-bit offsets whose
//!   top bit points into a table of 64-bit ones) beside `pack-*.pack`. A pack entry is a
//!   type-and-size varint header, for deltas the base (a backwards offset in the same pack,
//!   or the base's id), then zlib-deflated data. A delta is a list of "copy this range of the
//!   base" and "insert these bytes" instructions.
//!
//! Trust nothing, answer only when sure: every object put together here is hashed and must
//! match the id it was asked for, so a misread (or a corrupt file) can never pass for an
//! answer. `None` always means "ask git": a missing object (git knows about alternates,
//! promisor remotes and packs written a moment ago), a SHA-256 repository, an index
//! version 1, a revision form other than the few in [`Odb::get`], an over-long delta chain,
//! a hash mismatch. So the pipe stays the authority, and this is a shortcut in front of it.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use miniz_oxide::inflate::stream::{InflateState, MinReset, inflate};
use miniz_oxide::{DataFormat, MZError, MZFlush, MZStatus};
use sha1::{Digest, Sha1};

use super::git_objects::{Object, hex, parse_tree};

/// Larger objects are left to git (as big as the pipe accepts).
const MAX_OBJECT: usize = 64 << 20;
/// Longer delta chains are left to git (its own default depth is 50, `gc --aggressive` 250),
/// and so are chains whose instructions add up to more than [`MAX_OBJECT`].
const MAX_CHAIN: usize = 1000;
/// Deeper tag chains (a tag of a tag of …) are left to git.
const MAX_PEEL: usize = 16;
/// What one read of compressed pack data asks for.
const CHUNK: usize = 16 << 10;
/// What the first read of a loose object asks for (and the room first made for it
/// inflated): config files and commits are smaller.
const LOOSE_FIRST: usize = 4 << 10;
/// How often a session looks at the pack directory even when no object was missing.
const PACK_RECHECK: Duration = Duration::from_secs(2);
/// An id's length in bytes (SHA-1).
const ID_LEN: usize = 20;

/// The object kinds by their pack type numbers (1–4; 6 and 7 are deltas).
const KINDS: [&str; 5] = ["", "commit", "tree", "blob", "tag"];
const OFS_DELTA: u8 = 6;
const REF_DELTA: u8 = 7;

/// One repository's object files.
pub struct Odb {
    objects: PathBuf,
    packs: Vec<Pack>,
    /// The pack directory's modification time when `packs` was listed: a miss lists it
    /// again only when it changed (a push or a repack wrote a pack).
    listed: Option<SystemTime>,
    /// When the pack directory was last looked at: a session that never misses looks again
    /// every [`PACK_RECHECK`] all the same, so that packs a `git gc` deleted are let go of
    /// (an open file keeps its disk space).
    checked: Instant,
    /// Kept between objects: a fresh one is ~43 KB to allocate and zero.
    inflater: Inflater,
}

/// A zlib stream state and an input buffer, reused from one object to the next.
struct Inflater {
    state: Box<InflateState>,
    input: Vec<u8>,
}

/// One pack and its index, open.
struct Pack {
    idx: File,
    pack: File,
    /// Cumulative object counts by first id byte.
    fanout: [u32; 256],
}

impl Odb {
    /// The object files of the repository at `dir` (bare, or a work tree with `.git/`);
    /// `None` when there are none this reader understands.
    pub fn open(dir: &Path) -> Option<Odb> {
        let git_dir = if dir.join("objects").is_dir() && dir.join("HEAD").is_file() {
            dir.to_path_buf()
        } else if dir.join(".git/objects").is_dir() {
            dir.join(".git")
        } else {
            return None;
        };
        // `extensions.objectFormat = sha256`: ids of 32 bytes, which this reader does not do.
        let config = std::fs::read_to_string(git_dir.join("config")).unwrap_or_default();
        if config.to_ascii_lowercase().contains("objectformat") {
            return None;
        }
        let mut odb = Odb {
            objects: git_dir.join("objects"),
            packs: Vec::new(),
            listed: None,
            checked: Instant::now(),
            inflater: Inflater {
                state: InflateState::new_boxed(DataFormat::Zlib),
                input: Vec::new(),
            },
        };
        odb.list_packs();
        Some(odb)
    }

    /// The object `spec` names, for the forms `<id>`, `<id>^{commit}`, `<id>^{tree}` and
    /// `<id>:<path>` with a full lowercase hex id; `None` means "ask git" (see the module
    /// documentation), never "missing".
    pub fn get(&mut self, spec: &str) -> Option<Object> {
        if self.checked.elapsed() >= PACK_RECHECK {
            self.list_packs();
        }
        let (rev, path) = match spec.split_once(':') {
            Some((rev, path)) => (rev, Some(path)),
            None => (spec, None),
        };
        let (id, peel) = if let Some(id) = rev.strip_suffix("^{commit}") {
            (id, Some("commit"))
        } else if let Some(id) = rev.strip_suffix("^{tree}") {
            (id, Some("tree"))
        } else {
            (rev, None)
        };
        let id = parse_hex(id)?;
        let obj = self.object(&id)?;
        match (peel, path) {
            (None, None) => Some(obj),
            (Some("commit"), None) => self.peel_to_commit(obj),
            (Some(_), None) => self.peel_to_tree(obj),
            (_, Some(path)) => {
                let tree = match peel {
                    Some("commit") => {
                        let commit = self.peel_to_commit(obj)?;
                        self.peel_to_tree(commit)?
                    }
                    _ => self.peel_to_tree(obj)?,
                };
                self.walk(tree, path)
            }
        }
    }

    /// `obj` with annotated tags followed to what they tag, which must be a commit.
    fn peel_to_commit(&mut self, obj: Object) -> Option<Object> {
        let obj = self.peel_tags(obj)?;
        (obj.kind == "commit").then_some(obj)
    }

    /// `obj` as a tree: itself, a commit's root tree, or what a tag peels to as a tree.
    fn peel_to_tree(&mut self, obj: Object) -> Option<Object> {
        let obj = self.peel_tags(obj)?;
        match obj.kind.as_str() {
            "tree" => Some(obj),
            "commit" => {
                let tree = header(&obj.data, b"tree ")?;
                let tree = self.object(&parse_hex(tree)?)?;
                (tree.kind == "tree").then_some(tree)
            }
            _ => None,
        }
    }

    fn peel_tags(&mut self, mut obj: Object) -> Option<Object> {
        for _ in 0..MAX_PEEL {
            if obj.kind != "tag" {
                return Some(obj);
            }
            let target = header(&obj.data, b"object ")?;
            obj = self.object(&parse_hex(target)?)?;
        }
        None
    }

    /// The object at `path` below `tree`; plain components only (no `.`, `..` or empty
    /// ones, which git resolves its own way).
    fn walk(&mut self, mut obj: Object, path: &str) -> Option<Object> {
        for name in path.split('/') {
            if name.is_empty() || name == "." || name == ".." || obj.kind != "tree" {
                return None;
            }
            let entries = parse_tree(&obj.id, &obj.data, ID_LEN).ok()?;
            let entry = entries.iter().find(|e| e.name == name.as_bytes())?;
            // A submodule's commit is not in this repository.
            if entry.mode & 0o170000 == 0o160000 {
                return None;
            }
            let id: [u8; ID_LEN] = entry.id.as_slice().try_into().ok()?;
            obj = self.object(&id)?;
        }
        Some(obj)
    }

    /// The object with id `id`, read, put together and checked against the id.
    fn object(&mut self, id: &[u8; ID_LEN]) -> Option<Object> {
        let (kind, data) = match self.read(id) {
            Some(found) => found,
            // Not in the packs listed, nor loose: maybe in a pack written since.
            None if self.list_packs() => self.read(id)?,
            None => return None,
        };
        if !hashes_to(kind, &data, id) {
            tracing::debug!(
                id = hex(id),
                "git object read in place does not match its id"
            );
            return None;
        }
        Some(Object {
            id: hex(id),
            kind: kind.to_string(),
            id_len: ID_LEN,
            data,
        })
    }

    /// Object `id` from a pack, else loose; not yet checked against its id.
    fn read(&mut self, id: &[u8; ID_LEN]) -> Option<(&'static str, Vec<u8>)> {
        match self.pack_of(id) {
            Some((pack, offset)) => self.packed(pack, offset),
            None => self.loose(id),
        }
    }

    /// Which listed pack holds `id`, at what offset.
    fn pack_of(&self, id: &[u8; ID_LEN]) -> Option<(usize, u64)> {
        self.packs
            .iter()
            .enumerate()
            .find_map(|(i, pack)| Some((i, pack.find(id)?)))
    }

    /// Lists the packs again if the pack directory changed since the last listing; whether
    /// it did.
    fn list_packs(&mut self) -> bool {
        self.checked = Instant::now();
        let dir = self.objects.join("pack");
        let modified = std::fs::metadata(&dir).and_then(|m| m.modified()).ok();
        if self.listed.is_some() && modified == self.listed {
            return false;
        }
        self.listed = modified;
        self.packs = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "idx"))
            .filter_map(|idx| Pack::open(&idx))
            .collect();
        true
    }

    fn loose_path(&self, id: &[u8; ID_LEN]) -> PathBuf {
        let name = hex(id);
        self.objects.join(&name[..2]).join(&name[2..])
    }

    fn loose(&mut self, id: &[u8; ID_LEN]) -> Option<(&'static str, Vec<u8>)> {
        let file = File::open(self.loose_path(id)).ok()?;
        let raw = self.inflater.inflate(&file, 0, None)?;
        let nul = raw.iter().position(|&b| b == 0)?;
        let head = std::str::from_utf8(&raw[..nul]).ok()?;
        let (kind, size) = head.split_once(' ')?;
        let kind = KINDS[1..].iter().find(|k| **k == kind)?;
        let size: usize = size.parse().ok()?;
        let data = raw.get(nul + 1..)?;
        (data.len() == size).then(|| (*kind, data.to_vec()))
    }

    /// The object at `offset` in pack `pack`: its delta chain walked back to a base, then
    /// the deltas applied oldest first.
    fn packed(&mut self, pack: usize, offset: u64) -> Option<(&'static str, Vec<u8>)> {
        let (mut pack, mut offset) = (pack, offset);
        // The instructions of the deltas met on the way, newest first, and their bytes: a
        // long chain of large deltas is left to git rather than held in memory here.
        let mut chain: Vec<Vec<u8>> = Vec::new();
        let mut held = 0usize;
        loop {
            if chain.len() > MAX_CHAIN || held > MAX_OBJECT {
                return None;
            }
            let entry = self.packs[pack].entry_header(offset)?;
            held += entry.size;
            let data =
                self.inflater
                    .inflate(&self.packs[pack].pack, entry.data_at, Some(entry.size))?;
            match entry.base {
                Base::None(kind) => {
                    let mut object = data;
                    for delta in chain.iter().rev() {
                        object = apply_delta(&object, delta)?;
                    }
                    return Some((kind, object));
                }
                Base::Offset(base) => {
                    chain.push(data);
                    offset = base;
                }
                Base::Id(base) => {
                    chain.push(data);
                    match self.pack_of(&base) {
                        Some(found) => (pack, offset) = found,
                        // A thin pack's base stored loose: the chain ends there.
                        None => {
                            let (kind, mut object) = self.loose(&base)?;
                            for delta in chain.iter().rev() {
                                object = apply_delta(&object, delta)?;
                            }
                            return Some((kind, object));
                        }
                    }
                }
            }
        }
    }
}

/// What an entry's base is.
enum Base {
    /// Not a delta: an object of this kind.
    None(&'static str),
    /// An offset delta's base, at this offset of the same pack.
    Offset(u64),
    /// A ref delta's base, by id.
    Id([u8; ID_LEN]),
}

/// A pack entry's header.
struct EntryHeader {
    base: Base,
    /// The size of the entry's data once inflated (for a delta: of its instructions).
    size: usize,
    /// Where the deflated data starts.
    data_at: u64,
}

impl Pack {
    fn open(idx_path: &Path) -> Option<Pack> {
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
    fn find(&self, id: &[u8; ID_LEN]) -> Option<u64> {
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

    fn entry_header(&self, offset: u64) -> Option<EntryHeader> {
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
            1..=4 => Base::None(KINDS[usize::from(kind)]),
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

/// Reads into `buf` from `offset`, as much as there is (less near the end of the file).
fn read_at_most(file: &File, buf: &mut [u8], offset: u64) -> Option<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read_at(&mut buf[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    Some(filled)
}

impl Inflater {
    /// Inflates the zlib stream that starts at `offset` of `file`: exactly `size` bytes when
    /// the size is known (a pack entry), else at most [`MAX_OBJECT`] plus a header (a loose
    /// object).
    fn inflate(&mut self, file: &File, offset: u64, size: Option<usize>) -> Option<Vec<u8>> {
        let limit = size.unwrap_or(MAX_OBJECT + 64);
        // No zeroing of the window: what a bad stream could copy from an earlier object's
        // leftovers fails the id check all the same.
        self.state.reset_as(MinReset);
        // One byte of room beyond the limit: a stream that writes it is longer than it says.
        let mut out = vec![0u8; size.map_or(LOOSE_FIRST, |s| s + 1)];
        let mut written = 0;
        // A small object's deflated data is about its size: read that much first.
        let first = size.map_or(LOOSE_FIRST, |s| (s + s / 8 + 64).min(CHUNK));
        let input = &mut self.input;
        input.clear();
        input.resize(first, 0);
        let (mut pos, mut filled) = (0, 0);
        let mut read_at = offset;
        loop {
            if written == out.len() {
                if out.len() > limit {
                    return None;
                }
                out.resize((out.len() * 2).min(limit + 1), 0);
            }
            let result = inflate(
                &mut self.state,
                &input[pos..filled],
                &mut out[written..],
                MZFlush::None,
            );
            pos += result.bytes_consumed;
            written += result.bytes_written;
            match result.status {
                Ok(MZStatus::StreamEnd) => {
                    if written > limit || size.is_some_and(|s| written != s) {
                        return None;
                    }
                    out.truncate(written);
                    return Some(out);
                }
                // Buf: no progress without more input or more room.
                Ok(_) | Err(MZError::Buf) => {}
                Err(_) => return None,
            }
            if result.bytes_consumed == 0 && result.bytes_written == 0 {
                if pos < filled && written < out.len() {
                    // Input and room, and still no progress.
                    return None;
                }
                if pos == filled {
                    if input.len() < CHUNK {
                        input.resize(CHUNK, 0);
                    }
                    filled = read_at_most(file, input, read_at)?;
                    if filled == 0 {
                        // The file ends inside the stream.
                        return None;
                    }
                    pos = 0;
                    read_at += filled as u64;
                }
            }
        }
    }
}

/// `base` changed by the delta `delta` (see the module documentation).
fn apply_delta(base: &[u8], delta: &[u8]) -> Option<Vec<u8>> {
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
fn delta_size(delta: &[u8], mut at: usize) -> Option<(usize, usize)> {
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

/// Whether `<kind> <len>\0<data>` hashes to `id`.
fn hashes_to(kind: &str, data: &[u8], id: &[u8; ID_LEN]) -> bool {
    let mut hasher = Sha1::new();
    hasher.update(format!("{kind} {}\0", data.len()).as_bytes());
    hasher.update(data);
    hasher.finalize().as_slice() == id
}

/// The value of header line `name` (with its trailing space) of a commit or tag, up to the
/// blank line that ends the headers.
fn header<'a>(data: &'a [u8], name: &[u8]) -> Option<&'a str> {
    for line in data.split(|&b| b == b'\n') {
        if line.is_empty() {
            return None;
        }
        if let Some(value) = line.strip_prefix(name) {
            return std::str::from_utf8(value).ok();
        }
    }
    None
}

/// A full lowercase hex SHA-1 id.
fn parse_hex(s: &str) -> Option<[u8; ID_LEN]> {
    if s.len() != ID_LEN * 2 {
        return None;
    }
    let mut id = [0u8; ID_LEN];
    for (i, pair) in s.as_bytes().chunks(2).enumerate() {
        let digit = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        id[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(id)
}

fn be32(b: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(..4)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::*;
    use crate::ci::forge::git_objects::CatFile;
    use crate::ci::forge::git_objects::testing::{commit_all, git};

    /// A history with what packs make deltas of (versions of a large file), directories,
    /// an empty file, a symlink, and tags of commits and of tags; its commits and tags.
    fn history(dir: &Path) -> Vec<String> {
        git(dir, &["init", "-q", "-b", "main"]);
        let mut revs = Vec::new();
        let mut big: Vec<String> = (0..400)
            .map(|i| format!("line {i} of a config\n"))
            .collect();
        std::fs::create_dir_all(dir.join(".woodpecker/sub")).unwrap();
        for round in 0..12 {
            big[round * 7] = format!("changed in round {round}\n");
            std::fs::write(dir.join("big.txt"), big.concat()).unwrap();
            std::fs::write(
                dir.join(".woodpecker/build.yaml"),
                format!("steps:\n  - name: round-{round}\n    image: alpine\n"),
            )
            .unwrap();
            std::fs::write(
                dir.join(".woodpecker/sub/deep.yml"),
                big[..round + 1].concat(),
            )
            .unwrap();
            if round == 3 {
                std::fs::write(dir.join("empty"), "").unwrap();
                std::os::unix::fs::symlink("big.txt", dir.join("link")).unwrap();
            }
            revs.push(commit_all(dir, &format!("round {round}\n\nbody {round}")));
        }
        git(dir, &["tag", "-a", "-m", "a tag", "v1", &revs[4]]);
        git(
            dir,
            &["tag", "-a", "-m", "a tag of a tag", "v1-again", "v1"],
        );
        revs.push(git(dir, &["rev-parse", "v1"]).trim().to_string());
        revs.push(git(dir, &["rev-parse", "v1-again"]).trim().to_string());
        revs
    }

    fn all_objects(dir: &Path) -> Vec<String> {
        git(
            dir,
            &[
                "cat-file",
                "--batch-all-objects",
                "--batch-check=%(objectname)",
            ],
        )
        .lines()
        .map(str::to_string)
        .collect()
    }

    /// Every object, and every spec form over the commits and tags, read in place equals
    /// git's answer.
    fn assert_reads_as_git(dir: &Path, revs: &[String]) {
        let mut odb = Odb::open(dir).expect("object files found");
        let mut cat = CatFile::start(dir, Duration::from_secs(10))
            .unwrap()
            .pipe_only();
        let objects = all_objects(dir);
        assert!(objects.len() > 40, "{}", objects.len());
        let mut specs = objects.clone();
        for rev in revs {
            for form in [
                format!("{rev}^{{commit}}"),
                format!("{rev}^{{tree}}"),
                format!("{rev}:.woodpecker"),
                format!("{rev}:.woodpecker/build.yaml"),
                format!("{rev}^{{commit}}:.woodpecker/sub/deep.yml"),
                format!("{rev}:big.txt"),
            ] {
                specs.push(form);
            }
        }
        for spec in specs {
            let git_says = cat.get(&spec).unwrap();
            let read = odb.get(&spec);
            match (&read, &git_says) {
                (Some(read), Some(said)) => assert_eq!(read, said, "{spec}"),
                // Not there at this commit: git says missing, the reader leaves it to git.
                (None, None) => {}
                _ => panic!("{spec}: read {read:?}, git says {git_says:?}"),
            }
        }
        for id in objects {
            assert!(odb.get(&id).is_some(), "{id} read in place");
        }
    }

    fn packs(dir: &Path) -> Vec<PathBuf> {
        std::fs::read_dir(dir.join(".git/objects/pack"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "pack"))
            .collect()
    }

    /// How many objects of the repository's packs are deltas.
    fn deltas(dir: &Path) -> usize {
        packs(dir)
            .iter()
            .map(|pack| {
                git(dir, &["verify-pack", "-v", pack.to_str().unwrap()])
                    .lines()
                    // Delta lines name their base: `id type size packed offset depth base`.
                    .filter(|l| l.split_whitespace().count() == 7)
                    .count()
            })
            .sum()
    }

    #[test]
    fn loose_objects_read_as_git_reads_them() {
        let repo = tempfile::tempdir().unwrap();
        let revs = history(repo.path());
        assert!(packs(repo.path()).is_empty());
        assert_reads_as_git(repo.path(), &revs);
    }

    #[test]
    fn packed_objects_with_offset_deltas_read_as_git_reads_them() {
        let repo = tempfile::tempdir().unwrap();
        let revs = history(repo.path());
        git(
            repo.path(),
            &["repack", "-adq", "--depth=50", "--window=50"],
        );
        assert!(deltas(repo.path()) > 10, "the pack has deltas");
        assert_reads_as_git(repo.path(), &revs);
    }

    #[test]
    fn packed_objects_with_ref_deltas_and_large_offsets_read_as_git_reads_them() {
        let repo = tempfile::tempdir().unwrap();
        let d = repo.path();
        let revs = history(d);
        git(
            d,
            &["-c", "repack.useDeltaBaseOffset=false", "repack", "-adq"],
        );
        assert!(deltas(d) > 10, "the pack has deltas");
        // Index it again with the offsets past the middle of the pack in the 64-bit table
        // (git rejects an index whose every offset is there).
        let pack = packs(d).remove(0);
        let middle = std::fs::metadata(&pack).unwrap().len() / 2;
        std::fs::remove_file(pack.with_extension("idx")).unwrap();
        git(
            d,
            &[
                "index-pack",
                &format!("--index-version=2,{middle}"),
                pack.to_str().unwrap(),
            ],
        );
        let idx = std::fs::read(pack.with_extension("idx")).unwrap();
        let count = be32(&idx[8 + 255 * 4..]).unwrap() as usize;
        let large = (idx.len() - (8 + 1024 + count * 28 + 40)) / 8;
        assert!(
            large > 0 && large < count,
            "{large} of {count} offsets are 64-bit"
        );
        assert_reads_as_git(d, &revs);
    }

    #[test]
    fn a_pack_written_after_opening_is_found() {
        let repo = tempfile::tempdir().unwrap();
        let d = repo.path();
        history(d);
        git(d, &["repack", "-adq"]);
        let mut odb = Odb::open(d).unwrap();
        std::fs::write(d.join("new"), "new file\n").unwrap();
        let new = commit_all(d, "new");
        git(d, &["repack", "-adq"]);
        assert!(
            !d.join(".git/objects")
                .join(&new[..2])
                .join(&new[2..])
                .exists()
        );
        let read = odb
            .get(&format!("{new}:new"))
            .expect("found in the new pack");
        assert_eq!(read.data, b"new file\n");
    }

    #[test]
    fn packs_deleted_by_a_repack_are_let_go_of() {
        let repo = tempfile::tempdir().unwrap();
        let d = repo.path();
        let revs = history(d);
        git(d, &["repack", "-adq"]);
        let mut odb = Odb::open(d).unwrap();
        let old = packs(d);
        assert_eq!(odb.packs.len(), 1);
        std::fs::write(d.join("more"), "more\n").unwrap();
        commit_all(d, "more");
        git(d, &["repack", "-adq"]);
        assert!(old.iter().all(|p| !p.exists()), "the old pack is deleted");
        // Open descriptors of the deleted pack files (Linux shows them as "<path> (deleted)").
        let held = || {
            std::fs::read_dir("/proc/self/fd")
                .unwrap()
                .flatten()
                .filter_map(|fd| std::fs::read_link(fd.path()).ok())
                .filter(|target| {
                    let target = target.to_string_lossy();
                    old.iter()
                        .any(|p| target.starts_with(&*p.to_string_lossy()))
                })
                .count()
        };
        // Found in the deleted (still open) pack, so no miss lists the directory again…
        assert!(odb.get(&revs[0]).is_some());
        assert_eq!(held(), 1);
        // …but the periodic look does.
        odb.checked -= PACK_RECHECK;
        assert!(odb.get(&revs[0]).is_some());
        assert_eq!(held(), 0, "the deleted pack is closed");
    }

    #[test]
    fn what_it_is_not_sure_of_is_left_to_git() {
        let repo = tempfile::tempdir().unwrap();
        let d = repo.path();
        let revs = history(d);
        let mut odb = Odb::open(d).unwrap();
        let head = &revs[11];
        for spec in [
            "0123456789012345678901234567890123456789".to_string(),
            head.to_uppercase(),
            head[..12].to_string(),
            "HEAD".into(),
            "main:big.txt".into(),
            format!("{head}:"),
            format!("{head}:./big.txt"),
            format!("{head}:.woodpecker/../big.txt"),
            format!("{head}:.woodpecker//build.yaml"),
            format!("{head}:no/such/file"),
            format!("{head}^{{blob}}"),
            format!("{head}:big.txt:more"),
        ] {
            assert_eq!(odb.get(&spec), None, "{spec}");
        }
        // A blob is no commit and has no tree.
        let blob = git(d, &["rev-parse", &format!("{head}:big.txt")]);
        assert_eq!(odb.get(&format!("{}^{{commit}}", blob.trim())), None);
        assert_eq!(odb.get(&format!("{}^{{tree}}", blob.trim())), None);

        // A loose object whose content is another object's does not hash to its name.
        let id = git(d, &["rev-parse", &format!("{head}:empty")])
            .trim()
            .to_string();
        let other = git(d, &["rev-parse", &format!("{head}:big.txt")])
            .trim()
            .to_string();
        let path = |id: &str| d.join(".git/objects").join(&id[..2]).join(&id[2..]);
        std::fs::remove_file(path(&id)).unwrap();
        std::fs::copy(path(&other), path(&id)).unwrap();
        assert_eq!(odb.get(&id), None);
        assert!(odb.get(&other).is_some());
    }

    #[test]
    fn damaged_packs_give_no_answer_and_no_panic() {
        let repo = tempfile::tempdir().unwrap();
        let d = repo.path();
        history(d);
        git(d, &["repack", "-adq", "--depth=50", "--window=50"]);
        let objects = all_objects(d);
        let pack = packs(d).remove(0);
        let good = std::fs::read(&pack).unwrap();
        let idx = pack.with_extension("idx");
        let good_idx = std::fs::read(&idx).unwrap();
        // Truncated at, and bytes flipped at, spots through the pack and the index.
        for cut in (0..good.len()).step_by(good.len() / 23 + 1) {
            let mut damaged = good.clone();
            damaged.truncate(cut);
            std::fs::write(&pack, &damaged).unwrap();
            let mut odb = Odb::open(d).unwrap();
            for id in &objects {
                let _ = odb.get(id);
            }
            let mut flipped = good.clone();
            flipped[cut] ^= 0x5a;
            std::fs::write(&pack, &flipped).unwrap();
            answers_only_what_was_asked(d, &objects);
        }
        std::fs::write(&pack, &good).unwrap();
        for at in (0..good_idx.len()).step_by(good_idx.len() / 17 + 1) {
            let mut flipped = good_idx.clone();
            flipped[at] ^= 0xff;
            std::fs::write(&idx, &flipped).unwrap();
            answers_only_what_was_asked(d, &objects);
        }
    }

    /// Every object a fresh reader of `dir` does answer for is the one asked for.
    fn answers_only_what_was_asked(dir: &Path, objects: &[String]) {
        let mut odb = Odb::open(dir).unwrap();
        for id in objects {
            if let Some(obj) = odb.get(id) {
                assert_eq!(&obj.id, id);
            }
        }
    }

    #[test]
    fn bare_repositories_are_read_and_sha256_ones_left_to_git() {
        let repo = tempfile::tempdir().unwrap();
        let revs = history(repo.path());
        let bare = tempfile::tempdir().unwrap();
        let b = bare.path().join("r.git");
        git(
            repo.path(),
            &["clone", "-q", "--bare", ".", b.to_str().unwrap()],
        );
        let mut odb = Odb::open(&b).expect("a bare repository");
        assert!(odb.get(&format!("{}^{{tree}}", revs[0])).is_some());

        let sha256 = tempfile::tempdir().unwrap();
        git(sha256.path(), &["init", "-q", "--object-format=sha256"]);
        assert!(Odb::open(sha256.path()).is_none());
        assert!(Odb::open(bare.path()).is_none(), "not a repository");
    }

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
