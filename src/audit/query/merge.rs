//! The records of audit files that match a filter, by their calls' start, in bounded memory.
//!
//! Each file is read one line at a time ([`crate::audit::lines`]), up to its length when the
//! query began. A file is in write order, which is call-start order except that a call's
//! outcome is written when it ends, after the records of calls that started meanwhile. So
//! the files' matching records are merged by their next record's start (a k-way merge) into
//! a reorder window of [`WINDOW_BYTES`] of matching records (8 MiB: some 18,000 records
//! of a few hundred bytes), and the earliest in the window
//! is given when the window is full (or the files are read). A record that started before
//! one already given (its call outlasted more matching records than the window holds) is
//! given at once, as soon as it is read, and counted in [`FileMatches::out_of_order`].
//!
//! Records of one start come in the order of the files given and of their lines: the order
//! of a stable sort of everything, which is what the window gives when nothing is out of
//! order. A `--limit` stops the reading once that many records were given.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::path::PathBuf;
use std::time::SystemTime;

use super::{Filter, Found};

use crate::audit::lines::{FileLines, MAX_LINE_BYTES};

/// The most matching records (their lines' bytes) held to put them in call-start order.
pub const WINDOW_BYTES: usize = 8 * 1024 * 1024;

/// Where a record sorts: its call's start (`None`: unreadable, first), its file's place in
/// the files given, its line.
type Key = (Option<SystemTime>, usize, usize);

/// A matching record waiting to be given: its line only (parsed again when given, so that
/// the window holds no more than its lines' bytes).
#[derive(Debug)]
struct Pending {
    key: Key,
    line: String,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

impl Eq for Pending {}

impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Pending {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key.cmp(&other.key)
    }
}

/// One file being read.
#[derive(Debug)]
struct Source {
    path: PathBuf,
    lines: Option<FileLines>,
}

/// The matching records of a set of files, one at a time, by their calls' start: an
/// iterator of records (or of the error reading a file).
#[derive(Debug)]
pub struct FileMatches {
    filter: Filter,
    files: Vec<(PathBuf, u64)>,
    sources: Vec<Source>,
    /// Each unfinished file's next matching record.
    next: BinaryHeap<Reverse<Pending>>,
    /// The reorder window.
    window: BinaryHeap<Reverse<Pending>>,
    window_bytes: usize,
    /// The window's size ([`WINDOW_BYTES`]).
    window_limit: usize,
    /// The latest key given.
    given: Option<Key>,
    count: usize,
    started: bool,
    /// Lines that are not intact records (`file:line: reason`), so far.
    pub unreadable: Vec<String>,
    /// Records given after one of a later start (see the module's documentation).
    pub out_of_order: u64,
}

impl FileMatches {
    /// Opens `files` (each up to its present length) for the records that match `filter`.
    pub fn open(files: &[PathBuf], filter: &Filter) -> std::io::Result<Self> {
        let files = files
            .iter()
            .map(|path| Ok((path.clone(), std::fs::metadata(path)?.len())))
            .collect::<std::io::Result<Vec<_>>>()?;
        Self::open_upto(files, filter.clone())
    }

    /// The same query again, over the same bytes of the same files (records appended since
    /// [`FileMatches::open`] are left out): the same records, in the same order.
    pub fn again(&self) -> std::io::Result<Self> {
        Self::open_upto(self.files.clone(), self.filter.clone())
    }

    fn open_upto(files: Vec<(PathBuf, u64)>, filter: Filter) -> std::io::Result<Self> {
        let sources = files
            .iter()
            .map(|(path, length)| {
                Ok(Source {
                    path: path.clone(),
                    lines: Some(FileLines::open_upto(path, *length)?),
                })
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(FileMatches {
            filter,
            files,
            sources,
            next: BinaryHeap::new(),
            window: BinaryHeap::new(),
            window_bytes: 0,
            window_limit: WINDOW_BYTES,
            given: None,
            count: 0,
            started: false,
            unreadable: Vec::new(),
            out_of_order: 0,
        })
    }

    /// The next matching record of file `index`, if any (the file is closed at its end).
    fn read(&mut self, index: usize) -> std::io::Result<Option<Pending>> {
        let Some(source) = self.sources.get_mut(index) else {
            return Ok(None);
        };
        let Some(lines) = source.lines.as_mut() else {
            return Ok(None);
        };
        while let Some(line) = lines.next_line()? {
            let number = line.number;
            let at = || format!("{}:{}", source.path.display(), number);
            if let Some(length) = line.oversized {
                if !line.torn {
                    self.unreadable.push(format!(
                        "{}: a line of {length} bytes: longer than any record ({MAX_LINE_BYTES} bytes at most)",
                        at()
                    ));
                }
                continue;
            }
            let text = match std::str::from_utf8(line.bytes) {
                Ok(text) => text,
                Err(_) if line.torn => continue,
                Err(err) => {
                    let column = err.valid_up_to();
                    self.unreadable.push(format!(
                        "{}: not UTF-8: byte 0x{:02x} at column {} (a record cannot hold it; the line was edited)",
                        at(),
                        line.bytes.get(column).copied().unwrap_or_default(),
                        column + 1
                    ));
                    continue;
                }
            };
            if text.trim().is_empty() {
                continue;
            }
            match crate::audit::format::parse_line(text) {
                Ok(parsed) if self.filter.matches(&parsed.stored) => {
                    let line = text.trim_end_matches('\r').to_owned();
                    let start = humantime::parse_rfc3339(&parsed.stored.record.timestamp).ok();
                    return Ok(Some(Pending {
                        key: (start, index, number),
                        line,
                    }));
                }
                Ok(_) => {}
                Err(_) if line.torn => {}
                Err(err) => self.unreadable.push(format!("{}: {err}", at())),
            }
        }
        source.lines = None;
        Ok(None)
    }

    /// The next record in call-start order.
    fn advance(&mut self) -> std::io::Result<Option<Found>> {
        if self.filter.limit.is_some_and(|limit| self.count >= limit) {
            return Ok(None);
        }
        if !self.started {
            self.started = true;
            for index in 0..self.sources.len() {
                if let Some(pending) = self.read(index)? {
                    self.next.push(Reverse(pending));
                }
            }
        }
        while self.window_bytes <= self.window_limit {
            let Some(Reverse(pending)) = self.next.pop() else {
                break;
            };
            if let Some(following) = self.read(pending.key.1)? {
                self.next.push(Reverse(following));
            }
            self.window_bytes += pending.line.len();
            self.window.push(Reverse(pending));
        }
        let Some(Reverse(pending)) = self.window.pop() else {
            return Ok(None);
        };
        self.window_bytes -= pending.line.len();
        match self.given {
            Some(given) if pending.key < given => self.out_of_order += 1,
            _ => self.given = Some(pending.key),
        }
        self.count += 1;
        // Read intact a moment ago, from the same bytes.
        let stored = crate::audit::format::parse_line(&pending.line)
            .map_err(|err| std::io::Error::new(std::io::ErrorKind::InvalidData, err))?
            .stored;
        Ok(Some(Found {
            line: pending.line,
            stored,
        }))
    }
}

impl Iterator for FileMatches {
    type Item = std::io::Result<Found>;

    fn next(&mut self) -> Option<Self::Item> {
        self.advance().transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::chain::{ChainHead, link};
    use crate::audit::record::AuditRecord;

    /// Lines of one stream whose calls started at the given seconds past 11:00.
    fn lines(starts: &[u32]) -> Vec<String> {
        let mut head = ChainHead::genesis();
        starts
            .iter()
            .map(|s| {
                let record = AuditRecord {
                    timestamp: format!("2026-11-30T11:00:{s:02}.000000Z"),
                    tool: format!("t{s}"),
                    ..Default::default()
                };
                let linked = link("r1", &head, &record, None).unwrap();
                head = linked.head();
                linked.line()
            })
            .collect()
    }

    fn tools(found: &mut FileMatches) -> Vec<String> {
        found
            .by_ref()
            .map(|f| f.unwrap().stored.record.tool)
            .collect()
    }

    #[test]
    fn a_line_that_is_not_utf8_is_named_and_the_rest_given() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        let l = lines(&[1, 2]);
        let mut bytes = format!("{}\n", l[0]).into_bytes();
        bytes.extend_from_slice(b"{\"v\":2,\xff}\n");
        bytes.extend_from_slice(format!("{}\n", l[1]).as_bytes());
        std::fs::write(&path, bytes).unwrap();
        let mut found = FileMatches::open(&[path], &Filter::default()).unwrap();
        assert_eq!(tools(&mut found), ["t1", "t2"]);
        assert_eq!(found.unreadable.len(), 1);
        assert!(
            found.unreadable[0].ends_with("a.log:2: not UTF-8: byte 0xff at column 8 (a record cannot hold it; the line was edited)"),
            "{:?}",
            found.unreadable
        );
    }

    #[test]
    fn files_merge_by_start_and_a_record_later_than_the_window_is_counted() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.log");
        let b = dir.path().join("b.log");
        std::fs::write(&a, format!("{}\n", lines(&[1, 4, 5, 3]).join("\n"))).unwrap();
        std::fs::write(&b, format!("{}\n", lines(&[2, 4, 6]).join("\n"))).unwrap();
        let files = [a, b];
        let mut found = FileMatches::open(&files, &Filter::default()).unwrap();
        assert_eq!(
            tools(&mut found),
            ["t1", "t2", "t3", "t4", "t4", "t5", "t6"]
        );
        assert_eq!(found.out_of_order, 0);
        // A window of one record cannot put t3 back before t4 and t5: it comes late,
        // counted.
        let mut small = FileMatches::open(&files, &Filter::default()).unwrap();
        small.window_limit = 1;
        let given = tools(&mut small);
        assert_eq!(given.len(), 7);
        assert_eq!(small.out_of_order, 1, "{given:?}");
    }
}
