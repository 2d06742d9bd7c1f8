//! Reading an audit file one line at a time, in bounded memory: one line is held at once,
//! and a line longer than [`MAX_LINE_BYTES`] (no record the sink writes comes near it) is
//! not held at all, only its length. `audit verify`, `audit query` and `audit tail` read
//! files through it, whatever their size.

use std::fs::File;
use std::io::{BufRead as _, BufReader, Read as _, Take};
use std::path::Path;

/// The longest line held: a record is tens of KiB at most (`super::limits`), so a longer
/// line is not one, and is reported without being read into memory.
pub const MAX_LINE_BYTES: usize = 4 * 1024 * 1024;

/// How much of a file is read from the disk at once.
const READ_BUFFER: usize = 64 * 1024;

/// One line of a file, without its newline.
#[derive(Debug)]
pub struct Line<'a> {
    /// Its number, from 1.
    pub number: usize,
    /// Its bytes (empty when it is longer than [`MAX_LINE_BYTES`]).
    pub bytes: &'a [u8],
    /// It is the file's last line and has no newline: a write cut short.
    pub torn: bool,
    /// Its length, when it is longer than [`MAX_LINE_BYTES`] (`bytes` is then empty).
    pub oversized: Option<u64>,
}

/// The lines of one file, read through a buffer.
#[derive(Debug)]
pub struct FileLines {
    reader: BufReader<Take<File>>,
    line: Vec<u8>,
    number: usize,
    consumed: u64,
}

impl FileLines {
    /// The lines of `path` as it is now and as it grows while being read.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        Self::open_upto(path, u64::MAX)
    }

    /// The lines of the first `len` bytes of `path` (what an earlier read of it saw, so that
    /// records appended since are left out).
    pub fn open_upto(path: &Path, len: u64) -> std::io::Result<Self> {
        let file = File::open(path)?;
        Ok(FileLines {
            reader: BufReader::with_capacity(READ_BUFFER, file.take(len)),
            line: Vec::new(),
            number: 0,
            consumed: 0,
        })
    }

    /// The bytes read so far (after the last line returned).
    pub fn consumed(&self) -> u64 {
        self.consumed
    }

    /// The next line, or `None` at the end of the file.
    pub fn next_line(&mut self) -> std::io::Result<Option<Line<'_>>> {
        self.line.clear();
        let mut length: u64 = 0;
        let mut ended = false;
        loop {
            let chunk = self.reader.fill_buf()?;
            if chunk.is_empty() {
                break;
            }
            let (take, found) = match chunk.iter().position(|b| *b == b'\n') {
                Some(at) => (at, true),
                None => (chunk.len(), false),
            };
            let room = MAX_LINE_BYTES.saturating_sub(self.line.len());
            if length + take as u64 <= MAX_LINE_BYTES as u64 {
                self.line.extend_from_slice(&chunk[..take.min(room)]);
            } else {
                // Too long to be a record: keep counting, hold nothing.
                self.line.clear();
            }
            length += take as u64;
            let used = take + usize::from(found);
            self.reader.consume(used);
            self.consumed += used as u64;
            if found {
                ended = true;
                break;
            }
        }
        if length == 0 && !ended {
            return Ok(None);
        }
        self.number += 1;
        let oversized = (length > MAX_LINE_BYTES as u64).then_some(length);
        if oversized.is_some() {
            self.line.clear();
        }
        Ok(Some(Line {
            number: self.number,
            bytes: &self.line,
            torn: !ended,
            oversized,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(text: &[u8]) -> Vec<(usize, Vec<u8>, bool, Option<u64>)> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.log");
        std::fs::write(&path, text).unwrap();
        let mut lines = FileLines::open(&path).unwrap();
        let mut out = Vec::new();
        while let Some(line) = lines.next_line().unwrap() {
            out.push((line.number, line.bytes.to_vec(), line.torn, line.oversized));
        }
        assert_eq!(lines.consumed(), text.len() as u64);
        out
    }

    #[test]
    fn lines_empty_lines_and_a_torn_last_line() {
        assert!(read_all(b"").is_empty());
        assert_eq!(
            read_all(b"a\n\nbc\r\nd"),
            [
                (1, b"a".to_vec(), false, None),
                (2, Vec::new(), false, None),
                (3, b"bc\r".to_vec(), false, None),
                (4, b"d".to_vec(), true, None),
            ]
        );
        assert_eq!(read_all(b"a\n"), [(1, b"a".to_vec(), false, None)]);
    }

    #[test]
    fn an_oversized_line_is_counted_not_held() {
        let mut text = vec![b'x'; MAX_LINE_BYTES + 10];
        text.extend_from_slice(b"\nok\n");
        let lines = read_all(&text);
        assert_eq!(lines.len(), 2);
        assert_eq!(
            lines[0],
            (1, Vec::new(), false, Some(MAX_LINE_BYTES as u64 + 10))
        );
        assert_eq!(lines[1], (2, b"ok".to_vec(), false, None));
    }

    #[test]
    fn a_limit_leaves_out_what_was_appended() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.log");
        std::fs::write(&path, b"a\nb\nc\n").unwrap();
        let mut lines = FileLines::open_upto(&path, 4).unwrap();
        assert_eq!(lines.next_line().unwrap().unwrap().bytes, b"a");
        assert_eq!(lines.next_line().unwrap().unwrap().bytes, b"b");
        assert!(lines.next_line().unwrap().is_none());
    }
}
