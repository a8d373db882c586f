//! Git objects as data: their kinds, ids and the parsers of their contents. No I/O: the
//! in-place reader ([`crate::odb`]) and the `cat-file` session ([`crate::CatFile`]) both
//! build on this module and on nothing of each other's.
//!
//! Tree objects are binary: a sequence of `<octal mode> SP <name> NUL <id>`, where the id
//! is 20 bytes in SHA-1 repositories and 32 in SHA-256 ones. Names are bytes, not
//! necessarily UTF-8.
//!
//! Commit objects are text: header lines (`tree`, `parent`…, `author`, `committer`, maybe
//! `encoding`, `gpgsig` with continuation lines that start with a space), an empty line, and
//! the message. Tags look the same, with `object` and `type` headers.

use std::fmt;

use crate::GitError;

/// Larger objects are refused (a config file, a commit or a tree listing is far smaller).
pub const MAX_OBJECT: usize = 64 << 20;
/// A SHA-1 id's length in bytes.
pub const ID_LEN: usize = 20;

/// The four kinds of git object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Commit,
    Tree,
    Blob,
    Tag,
}

impl Kind {
    /// The kind a header names (`commit`, `tree`, `blob`, `tag`).
    pub fn parse(name: &[u8]) -> Option<Kind> {
        match name {
            b"commit" => Some(Kind::Commit),
            b"tree" => Some(Kind::Tree),
            b"blob" => Some(Kind::Blob),
            b"tag" => Some(Kind::Tag),
            _ => None,
        }
    }

    /// The kind of a pack entry's type number (1–4; 6 and 7, deltas, are none).
    pub fn from_pack_type(number: u8) -> Option<Kind> {
        match number {
            1 => Some(Kind::Commit),
            2 => Some(Kind::Tree),
            3 => Some(Kind::Blob),
            4 => Some(Kind::Tag),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Commit => "commit",
            Kind::Tree => "tree",
            Kind::Blob => "blob",
            Kind::Tag => "tag",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `<kind> SP <size>`: how a loose object starts (before its NUL) and how a `cat-file
/// --batch` answer goes on after the id.
pub fn parse_header(head: &[u8]) -> Option<(Kind, usize)> {
    let space = head.iter().position(|&b| b == b' ')?;
    let kind = Kind::parse(&head[..space])?;
    let size = &head[space + 1..];
    if size.is_empty() || !size.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let size = std::str::from_utf8(size).ok()?.parse().ok()?;
    Some((kind, size))
}

/// An object: its id, kind and content.
#[derive(Debug, PartialEq, Eq)]
pub struct Object {
    /// The object's id, hex.
    pub id: String,
    pub kind: Kind,
    /// The object id's length in bytes (20: SHA-1, 32: SHA-256).
    pub id_len: usize,
    pub data: Vec<u8>,
}

impl Object {
    /// The entries of this tree object.
    pub fn tree_entries(&self) -> Result<Vec<TreeEntry>, GitError> {
        parse_tree(&self.id, &self.data, self.id_len)
    }
}

/// One entry of a tree object.
#[derive(Debug, PartialEq, Eq)]
pub struct TreeEntry {
    pub mode: u32,
    pub name: Vec<u8>,
    /// The entry's object id, raw bytes.
    pub id: Vec<u8>,
}

impl TreeEntry {
    /// A file (regular, executable or symlink), not a directory or a submodule.
    pub fn is_blob(&self) -> bool {
        self.mode & 0o170000 == 0o100000 || self.mode & 0o170000 == 0o120000
    }

    /// A directory (another tree).
    pub fn is_tree(&self) -> bool {
        self.mode & 0o170000 == 0o040000
    }

    /// A submodule: a commit of another repository.
    pub fn is_submodule(&self) -> bool {
        self.mode & 0o170000 == 0o160000
    }
}

/// What a commit object says (the parts a pipeline needs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    /// The commit's id, hex.
    pub id: String,
    /// Its root tree's id, hex.
    pub tree: String,
    /// Parent ids, hex, in order.
    pub parents: Vec<String>,
    pub author_name: String,
    pub author_email: String,
    /// The committer's time, Unix seconds (git's `%ct`); 0 when unreadable.
    pub committer_time: i64,
    /// Everything after the headers (git's `%B`), as text.
    pub message: String,
}

/// Hex of raw id bytes.
pub fn hex(id: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(id.len() * 2);
    for b in id {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 15) as usize] as char);
    }
    out
}

/// A full lowercase hex SHA-1 id.
pub fn parse_hex(s: &str) -> Option<[u8; ID_LEN]> {
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

/// The entries of raw tree object `id` whose entry ids are `id_len` bytes long.
pub fn parse_tree(id: &str, data: &[u8], id_len: usize) -> Result<Vec<TreeEntry>, GitError> {
    let bad = |why| GitError::Malformed {
        kind: Kind::Tree,
        id: id.to_string(),
        why,
    };
    let mut entries = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let space = rest
            .iter()
            .position(|&b| b == b' ')
            .ok_or_else(|| bad("no mode"))?;
        let mode = std::str::from_utf8(&rest[..space])
            .ok()
            .and_then(|m| u32::from_str_radix(m, 8).ok())
            .ok_or_else(|| bad("mode is not octal"))?;
        rest = &rest[space + 1..];
        let nul = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| bad("no name end"))?;
        let name = rest[..nul].to_vec();
        rest = &rest[nul + 1..];
        if rest.len() < id_len {
            return Err(bad("truncated id"));
        }
        let id = rest[..id_len].to_vec();
        rest = &rest[id_len..];
        entries.push(TreeEntry { mode, name, id });
    }
    Ok(entries)
}

/// Reads a commit object's headers and message the way `git show --format=…` does.
pub fn parse_commit(id: &str, data: &[u8]) -> Result<Commit, GitError> {
    let bad = |why| GitError::Malformed {
        kind: Kind::Commit,
        id: id.to_string(),
        why,
    };
    let (head, message) = match data.windows(2).position(|w| w == b"\n\n") {
        Some(at) => (&data[..at], &data[at + 2..]),
        None => (data.strip_suffix(b"\n").unwrap_or(data), &[][..]),
    };
    let mut commit = Commit {
        id: id.to_string(),
        tree: String::new(),
        parents: Vec::new(),
        author_name: String::new(),
        author_email: String::new(),
        committer_time: 0,
        message: String::from_utf8_lossy(message).into_owned(),
    };
    let (mut author, mut committer) = (false, false);
    for line in head.split(|&b| b == b'\n') {
        let (key, value) = match line.iter().position(|&b| b == b' ') {
            Some(at) => (&line[..at], &line[at + 1..]),
            None => (line, &[][..]),
        };
        match key {
            b"tree" if commit.tree.is_empty() => {
                commit.tree = String::from_utf8_lossy(value).into_owned();
            }
            b"parent" => commit
                .parents
                .push(String::from_utf8_lossy(value).into_owned()),
            b"author" if !author => {
                author = true;
                let (name, email) = ident(value);
                (commit.author_name, commit.author_email) = (name, email);
            }
            b"committer" if !committer => {
                committer = true;
                commit.committer_time = ident_time(value);
            }
            _ => {}
        }
    }
    let is_id =
        |s: &str| (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| b.is_ascii_hexdigit());
    if !is_id(&commit.tree) {
        return Err(bad("no tree"));
    }
    if !commit.parents.iter().all(|p| is_id(p)) {
        return Err(bad("bad parent"));
    }
    Ok(commit)
}

/// The value of header line `name` (with its trailing space) of a commit or tag, up to the
/// blank line that ends the headers.
pub fn header<'a>(data: &'a [u8], name: &[u8]) -> Option<&'a str> {
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

/// Name and email of an ident (`Name <email> 1700000000 +0100`), as git's
/// `split_ident_line` reads them: the name runs up to the first `<` (trailing blanks
/// dropped), the email up to the next `>`. Empty when there is no `<`.
fn ident(value: &[u8]) -> (String, String) {
    let Some(lt) = value.iter().position(|&b| b == b'<') else {
        return (String::new(), String::new());
    };
    let name = value[..lt].trim_ascii_end();
    let rest = &value[lt + 1..];
    let email = &rest[..rest.iter().position(|&b| b == b'>').unwrap_or(rest.len())];
    (
        String::from_utf8_lossy(name).into_owned(),
        String::from_utf8_lossy(email).into_owned(),
    )
}

/// The Unix time of an ident: the digits after its last `>`; 0 when there are none.
fn ident_time(value: &[u8]) -> i64 {
    let Some(gt) = value.iter().rposition(|&b| b == b'>') else {
        return 0;
    };
    let rest = value[gt + 1..].trim_ascii_start();
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&rest[..digits])
        .ok()
        .and_then(|d| d.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_headers_parse_from_bytes() {
        for kind in [Kind::Commit, Kind::Tree, Kind::Blob, Kind::Tag] {
            assert_eq!(Kind::parse(kind.as_str().as_bytes()), Some(kind));
            assert_eq!(kind.to_string(), kind.as_str());
        }
        assert_eq!(Kind::parse(b"Blob"), None);
        assert_eq!(Kind::parse(b""), None);
        let numbered: Vec<_> = (0..8).map(Kind::from_pack_type).collect();
        assert_eq!(
            numbered,
            [
                None,
                Some(Kind::Commit),
                Some(Kind::Tree),
                Some(Kind::Blob),
                Some(Kind::Tag),
                None,
                None,
                None
            ]
        );
        assert_eq!(parse_header(b"blob 12"), Some((Kind::Blob, 12)));
        assert_eq!(parse_header(b"tree 0"), Some((Kind::Tree, 0)));
        for bad in [
            &b"blob"[..],
            b"blob ",
            b"blob +1",
            b"blob -1",
            b"blob 1 ",
            b"blub 1",
            b"blob 99999999999999999999999",
        ] {
            assert_eq!(
                parse_header(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn ids_go_to_hex_and_back() {
        assert_eq!(hex(&[0, 0xab, 0x7f]), "00ab7f");
        let id: [u8; ID_LEN] = std::array::from_fn(|i| (i * 13) as u8);
        assert_eq!(parse_hex(&hex(&id)), Some(id));
        assert_eq!(parse_hex(&hex(&id).to_uppercase()), None);
        assert_eq!(parse_hex(&hex(&id)[..38]), None);
        assert_eq!(parse_hex(&"g".repeat(40)), None);
    }

    #[test]
    fn commit_headers_edge_cases() {
        let tree = "a".repeat(40);
        let raw = format!(
            "tree {tree}\nparent {p1}\nparent {p2}\nauthor No Email 12 +0000\ncommitter X <x> 99 +0000\ngpgsig -----BEGIN\n author fake <f> 1\n -----END\n\nmsg\n",
            p1 = "b".repeat(40),
            p2 = "c".repeat(40)
        );
        let c = parse_commit("id", raw.as_bytes()).unwrap();
        assert_eq!(c.parents.len(), 2);
        assert_eq!((c.author_name.as_str(), c.author_email.as_str()), ("", ""));
        assert_eq!((c.committer_time, c.message.as_str()), (99, "msg\n"));
        // No message at all, and garbage.
        let bare = parse_commit(
            "id",
            format!("tree {tree}\ncommitter X <x> 5 +0000\n").as_bytes(),
        )
        .unwrap();
        assert_eq!((bare.message.as_str(), bare.committer_time), ("", 5));
        assert!(parse_commit("id", b"").is_err());
        assert!(parse_commit("id", format!("tree {tree}\nparent zz\n\n").as_bytes()).is_err());
        assert_eq!(ident(b"A <b"), ("A".to_string(), "b".to_string()));
        assert_eq!(ident_time(b"A <b> x"), 0);
        // Header values end at the blank line.
        assert_eq!(header(raw.as_bytes(), b"tree "), Some(tree.as_str()));
        assert_eq!(header(b"tree x\n\nobject y\n", b"object "), None);
    }

    #[test]
    fn malformed_trees_are_errors() {
        assert!(parse_tree("t", b"100644 a\0short", 20).is_err());
        assert!(parse_tree("t", b"xyz a\0", 0).is_err());
        assert!(parse_tree("t", b"100644 a", 20).is_err());
        assert_eq!(parse_tree("t", b"", 20).unwrap(), vec![]);
        let err = parse_tree("t", b"100644 a", 20).unwrap_err();
        assert!(
            matches!(
                err,
                GitError::Malformed {
                    kind: Kind::Tree,
                    ..
                }
            ),
            "{err}"
        );
        let entries = parse_tree(
            "t",
            b"40000 d\0aaaaaaaaaaaaaaaaaaaa160000 s\0bbbbbbbbbbbbbbbbbbbb",
            20,
        )
        .unwrap();
        assert!(entries[0].is_tree() && !entries[0].is_blob());
        assert!(entries[1].is_submodule() && !entries[1].is_tree());
    }
}
