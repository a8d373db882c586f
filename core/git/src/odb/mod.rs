//! Reading git objects from the repository's own files, without asking a `git` process.
//!
//! Why: a push hook reads four objects (the commit, its tree, the parent's tree, the config
//! blob). Through the `cat-file --batch` pipe ([`crate::CatFile`]) each is a round trip to
//! another process: a write, a wake-up of git, its lookup, a wake-up of ours, ~0.2 ms and a
//! share of git's CPU per object, most of a hook's time in git. Read in place, an object
//! costs a few microseconds.
//!
//! What is read (the formats are described where they are read):
//!
//! - **Loose objects**: `objects/<2 hex>/<38 hex>`, zlib-deflated `<type> SP <size> NUL
//!   <content>` (`inflate.rs`).
//! - **Packs**: `objects/pack/pack-*.idx` beside `pack-*.pack` (`pack.rs`), whose entries
//!   may be deltas of other entries (`delta.rs`); what a chain of them resolves to is kept
//!   a while (`cache.rs`), so the next object of the chain starts from there.
//!
//! Trust nothing, answer only when sure: every object put together here is hashed and must
//! match the id it was asked for, so a misread (or a corrupt file) can never pass for an
//! answer. `None` always means "ask git": a missing object (git knows about alternates,
//! promisor remotes and packs written a moment ago), a SHA-256 repository, an index
//! version 1, a revision form other than the few in [`Odb::get`], an over-long delta chain,
//! a hash mismatch. So the pipe stays the authority, and this is a shortcut in front of it.

mod cache;
mod delta;
mod inflate;
mod pack;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use sha1::{Digest, Sha1};

use crate::object::{
    ID_LEN, Kind, MAX_OBJECT, Object, header, hex, parse_header, parse_hex, parse_tree,
};
use cache::DeltaBaseCache;
use delta::apply_delta;
use inflate::Inflater;
use pack::{Base, Pack};

/// Longer delta chains are left to git (its own default depth is 50, `gc --aggressive` 250),
/// and so are chains whose instructions add up to more than [`MAX_OBJECT`].
const MAX_CHAIN: usize = 1000;
/// Deeper tag chains (a tag of a tag of …) are left to git.
const MAX_PEEL: usize = 16;
/// How often a session looks at the pack directory even when no object was missing.
const PACK_RECHECK: Duration = Duration::from_secs(2);
/// What a session keeps of objects resolved from packs (see `cache.rs`). A push reads a few
/// objects, so this fills only as history is read; git's own `core.deltaBaseCacheLimit` is
/// 96 MiB, per process.
const DELTA_BASE_CACHE: usize = 32 << 20;

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
    cache: DeltaBaseCache,
    /// Pack entries inflated, to show what the cache saves.
    #[cfg(test)]
    inflated: usize,
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
            inflater: Inflater::new(),
            cache: DeltaBaseCache::new(DELTA_BASE_CACHE),
            #[cfg(test)]
            inflated: 0,
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
            (id, Some(Kind::Commit))
        } else if let Some(id) = rev.strip_suffix("^{tree}") {
            (id, Some(Kind::Tree))
        } else {
            (rev, None)
        };
        let id = parse_hex(id)?;
        let obj = self.object(&id)?;
        match (peel, path) {
            (None, None) => Some(obj),
            (Some(Kind::Commit), None) => self.peel_to_commit(obj),
            (Some(_), None) => self.peel_to_tree(obj),
            (_, Some(path)) => {
                let tree = match peel {
                    Some(Kind::Commit) => {
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
        (obj.kind == Kind::Commit).then_some(obj)
    }

    /// `obj` as a tree: itself, a commit's root tree, or what a tag peels to as a tree.
    fn peel_to_tree(&mut self, obj: Object) -> Option<Object> {
        let obj = self.peel_tags(obj)?;
        match obj.kind {
            Kind::Tree => Some(obj),
            Kind::Commit => {
                let tree = header(&obj.data, b"tree ")?;
                let tree = self.object(&parse_hex(tree)?)?;
                (tree.kind == Kind::Tree).then_some(tree)
            }
            _ => None,
        }
    }

    fn peel_tags(&mut self, mut obj: Object) -> Option<Object> {
        for _ in 0..MAX_PEEL {
            if obj.kind != Kind::Tag {
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
            if name.is_empty() || name == "." || name == ".." || obj.kind != Kind::Tree {
                return None;
            }
            let entries = parse_tree(&obj.id, &obj.data, ID_LEN).ok()?;
            let entry = entries.iter().find(|e| e.name == name.as_bytes())?;
            // A submodule's commit is not in this repository.
            if entry.is_submodule() {
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
            kind,
            id_len: ID_LEN,
            data,
        })
    }

    /// Object `id` from a pack, else loose; not yet checked against its id.
    fn read(&mut self, id: &[u8; ID_LEN]) -> Option<(Kind, Vec<u8>)> {
        match self.pack_of(id) {
            // The cache keeps its copy, for the deltas of it read next.
            Some((pack, offset)) => self
                .packed(pack, offset)
                .map(|(kind, data)| (kind, Arc::unwrap_or_clone(data))),
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
        // Packs still there are kept open (with what the cache holds of them): a pack's
        // name is its content's hash, so the same name is the same pack.
        let mut old = std::mem::take(&mut self.packs);
        self.packs = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "idx"))
            .filter_map(|idx| match old.iter().position(|p| p.idx_path == idx) {
                Some(i) => Some(old.swap_remove(i)),
                None => Pack::open(&idx),
            })
            .collect();
        let serials: Vec<u64> = self.packs.iter().map(|p| p.serial).collect();
        self.cache.retain_packs(|serial| serials.contains(&serial));
        true
    }

    fn loose_path(&self, id: &[u8; ID_LEN]) -> PathBuf {
        let name = hex(id);
        self.objects.join(&name[..2]).join(&name[2..])
    }

    fn loose(&mut self, id: &[u8; ID_LEN]) -> Option<(Kind, Vec<u8>)> {
        let file = File::open(self.loose_path(id)).ok()?;
        let raw = self.inflater.inflate_file(&file)?;
        let nul = raw.iter().position(|&b| b == 0)?;
        let (kind, size) = parse_header(&raw[..nul])?;
        let data = raw.get(nul + 1..)?;
        (data.len() == size).then(|| (kind, data.to_vec()))
    }

    /// The object at `offset` in pack `pack`: its delta chain walked back to a base (or to
    /// an entry resolved before, in the cache), then the deltas applied oldest first, each
    /// result kept in the cache.
    fn packed(&mut self, pack: usize, offset: u64) -> Option<(Kind, Arc<Vec<u8>>)> {
        let (mut pack, mut offset) = (pack, offset);
        // The deltas met on the way, newest first: where each entry is, and its
        // instructions. A long chain of large deltas is left to git rather than held in
        // memory here.
        let mut chain: Vec<(cache::Key, Vec<u8>)> = Vec::new();
        let mut held = 0usize;
        let (kind, mut object) = loop {
            let key = (self.packs[pack].serial, offset);
            if let Some(found) = self.cache.get(key) {
                break found;
            }
            if chain.len() > MAX_CHAIN || held > MAX_OBJECT {
                return None;
            }
            let entry = self.packs[pack].entry_header(offset)?;
            held += entry.size;
            let data = self.inflater.inflate(
                self.packs[pack].bytes_from(entry.data_at)?,
                Some(entry.size),
            )?;
            #[cfg(test)]
            {
                self.inflated += 1;
            }
            match entry.base {
                Base::None(kind) => {
                    let data = Arc::new(data);
                    self.cache.put(key, kind, data.clone());
                    break (kind, data);
                }
                Base::Offset(base) => {
                    chain.push((key, data));
                    offset = base;
                }
                Base::Id(base) => {
                    chain.push((key, data));
                    match self.pack_of(&base) {
                        Some(found) => (pack, offset) = found,
                        // A thin pack's base stored loose: the chain ends there.
                        None => {
                            let (kind, data) = self.loose(&base)?;
                            break (kind, Arc::new(data));
                        }
                    }
                }
            }
        };
        for (key, delta) in chain.iter().rev() {
            object = Arc::new(apply_delta(&object, delta)?);
            self.cache.put(*key, kind, object.clone());
        }
        Some((kind, object))
    }
}

/// Whether `<kind> <len>\0<data>` hashes to `id`.
fn hashes_to(kind: Kind, data: &[u8], id: &[u8; ID_LEN]) -> bool {
    let mut hasher = Sha1::new();
    hasher.update(format!("{kind} {}\0", data.len()).as_bytes());
    hasher.update(data);
    hasher.finalize().as_slice() == id
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::pack::be32;
    use super::*;
    use crate::testing::{batch_answers, commit_all, git};

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
        let answers = batch_answers(dir, &specs);
        for (spec, git_says) in specs.iter().zip(answers) {
            let read = odb.get(spec);
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

    /// The delta-base cache changes no answer, whatever its size, holds no more than its
    /// cap, and inflates each pack entry once when it has room.
    #[test]
    fn the_delta_base_cache_changes_no_answer_and_inflates_each_entry_once() {
        let repo = tempfile::tempdir().unwrap();
        let d = repo.path();
        let revs = history(d);
        git(d, &["repack", "-adq", "--depth=50", "--window=50"]);
        let deltas = deltas(d);
        assert!(deltas > 10, "the pack has deltas");
        let mut objects = all_objects(d);
        for rev in &revs {
            objects.push(format!("{rev}:big.txt"));
        }
        let read_all = |cap: usize| {
            let mut odb = Odb::open(d).unwrap();
            odb.cache = DeltaBaseCache::new(cap);
            let read: Vec<Option<Object>> = objects.iter().map(|id| odb.get(id)).collect();
            assert!(odb.cache.held() <= cap);
            (read, odb.inflated)
        };
        let (uncached, inflated_uncached) = read_all(0);
        assert!(uncached.iter().all(Option::is_some));
        let (small, _) = read_all(4 << 10);
        let (cached, inflated_cached) = read_all(DELTA_BASE_CACHE);
        assert_eq!(small, uncached, "a cache that evicts all the time");
        assert_eq!(cached, uncached, "a cache that keeps everything");
        let entries = all_objects(d).len();
        assert!(
            inflated_cached <= entries,
            "{inflated_cached} inflations of {entries} entries"
        );
        assert!(
            inflated_uncached > inflated_cached + deltas,
            "without the cache chains are inflated again: {inflated_uncached} vs {inflated_cached}"
        );
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
        // Maps of the deleted pack and index (Linux shows them as "<path> (deleted)"), and
        // open descriptors of them.
        let held = || {
            let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
            let fds: Vec<String> = std::fs::read_dir("/proc/self/fd")
                .unwrap()
                .flatten()
                .filter_map(|fd| std::fs::read_link(fd.path()).ok())
                .map(|target| target.to_string_lossy().into_owned())
                .collect();
            old.iter()
                .flat_map(|p| [p.clone(), p.with_extension("idx")])
                .filter(|p| {
                    let p = p.to_string_lossy();
                    maps.lines().any(|l| l.contains(&*p)) || fds.iter().any(|f| f.starts_with(&*p))
                })
                .count()
        };
        // Found in the deleted (still mapped) pack, so no miss lists the directory again…
        assert!(odb.get(&revs[0]).is_some());
        assert_eq!(held(), 2, "the pack and its index");
        // …but the periodic look does.
        odb.checked -= PACK_RECHECK;
        assert!(odb.get(&revs[0]).is_some());
        assert_eq!(held(), 0, "the deleted pack is let go of");
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
}
