//! zlib streams inflated from bytes in memory: a loose object's whole file, or a pack
//! entry's data where the mapped pack holds it. The stream state and the buffer a loose
//! file is read into are kept from one object to the next (a fresh state is ~43 KB to
//! allocate and zero).

use std::fs::File;
use std::io::Read;

use miniz_oxide::inflate::stream::{InflateState, MinReset, inflate};
use miniz_oxide::{DataFormat, MZError, MZFlush, MZStatus};

use crate::object::MAX_OBJECT;

/// The room first made for a loose object inflated: config files and commits are smaller.
const LOOSE_FIRST: usize = 4 << 10;
/// The largest loose file read: an object of [`MAX_OBJECT`] and its header deflated, with
/// room for zlib's worst case (stored blocks: 5 bytes per 64 KiB, and its own 6).
const LOOSE_FILE_MAX: u64 = (MAX_OBJECT + MAX_OBJECT / 1024 + 1024) as u64;

/// A zlib stream state and a file buffer, reused from one object to the next.
pub(super) struct Inflater {
    state: Box<InflateState>,
    file: Vec<u8>,
}

impl Inflater {
    pub(super) fn new() -> Inflater {
        Inflater {
            state: InflateState::new_boxed(DataFormat::Zlib),
            file: Vec::new(),
        }
    }

    /// The loose object file `file` inflated: at most [`MAX_OBJECT`] plus a header.
    pub(super) fn inflate_file(&mut self, file: &File) -> Option<Vec<u8>> {
        self.file.clear();
        // One byte past the limit tells a longer file from one of the limit's size.
        file.take(LOOSE_FILE_MAX + 1)
            .read_to_end(&mut self.file)
            .ok()?;
        if self.file.len() as u64 > LOOSE_FILE_MAX {
            return None;
        }
        let input = std::mem::take(&mut self.file);
        let out = self.inflate(&input, None);
        self.file = input;
        out
    }

    /// Inflates the zlib stream at the start of `input` (what follows it is ignored):
    /// exactly `size` bytes when the size is known (a pack entry), else at most
    /// [`MAX_OBJECT`] plus a header (a loose object).
    pub(super) fn inflate(&mut self, input: &[u8], size: Option<usize>) -> Option<Vec<u8>> {
        let limit = size.unwrap_or(MAX_OBJECT + 64);
        // No zeroing of the window: what a bad stream could copy from an earlier object's
        // leftovers fails the id check all the same.
        self.state.reset_as(MinReset);
        // One byte of room beyond the limit: a stream that writes it is longer than it says.
        let mut out = vec![0u8; size.map_or(LOOSE_FIRST, |s| s + 1)];
        let (mut pos, mut written) = (0, 0);
        loop {
            if written == out.len() {
                if out.len() > limit {
                    return None;
                }
                out.resize((out.len() * 2).min(limit + 1), 0);
            }
            let result = inflate(
                &mut self.state,
                &input[pos..],
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
            // All of the input is here: no progress with room left means it ended inside
            // the stream, or the stream is stuck.
            if result.bytes_consumed == 0 && result.bytes_written == 0 && written < out.len() {
                return None;
            }
        }
    }
}
