//! zlib streams read from a file at an offset: a loose object is one whole file, a pack
//! entry's data starts after its header. The stream state and the input buffer are kept
//! from one object to the next (a fresh state is ~43 KB to allocate and zero).

use std::fs::File;
use std::os::unix::fs::FileExt;

use miniz_oxide::inflate::stream::{InflateState, MinReset, inflate};
use miniz_oxide::{DataFormat, MZError, MZFlush, MZStatus};

use crate::object::MAX_OBJECT;

/// What one read of compressed data asks for.
const CHUNK: usize = 16 << 10;
/// What the first read of a loose object asks for (and the room first made for it
/// inflated): config files and commits are smaller.
const LOOSE_FIRST: usize = 4 << 10;

/// A zlib stream state and an input buffer, reused from one object to the next.
pub(super) struct Inflater {
    state: Box<InflateState>,
    input: Vec<u8>,
}

/// Reads into `buf` from `offset`, as much as there is (less near the end of the file).
pub(super) fn read_at_most(file: &File, buf: &mut [u8], offset: u64) -> Option<usize> {
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
    pub(super) fn new() -> Inflater {
        Inflater {
            state: InflateState::new_boxed(DataFormat::Zlib),
            input: Vec::new(),
        }
    }

    /// Inflates the zlib stream that starts at `offset` of `file`: exactly `size` bytes when
    /// the size is known (a pack entry), else at most [`MAX_OBJECT`] plus a header (a loose
    /// object).
    pub(super) fn inflate(
        &mut self,
        file: &File,
        offset: u64,
        size: Option<usize>,
    ) -> Option<Vec<u8>> {
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
