//! Header look-ups. Names compare case-insensitively, as HTTP requires.

use crate::Header;

/// The first value of header `name` as text (non-UTF-8 values count as absent).
pub fn header<'a>(headers: &'a [Header], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case(name))
        .and_then(|h| std::str::from_utf8(&h.value).ok())
        .map(str::trim)
}

/// A header to send, from text.
pub fn text(name: &str, value: &str) -> Header {
    Header {
        name: name.to_string(),
        value: value.as_bytes().to_vec(),
    }
}
