//! Verification of audit files in bounded memory, whatever their size: files are read one
//! line at a time ([`crate::audit::lines`]), twice.
//!
//! 1. The index: every line is checked (UTF-8, not empty, a record matching its hash) in the
//!    order the files were given, as before; what is kept is what the walk needs: the
//!    `prune` records, each stream's first sequence number in each file, and each file's
//!    length (the walk reads no further, so records appended meanwhile are left out).
//! 2. The walk: each stream's records in the order of its files (by its first sequence
//!    number in each) and of their lines. When one order of the files suits every stream
//!    (always, when the files are given oldest first), the files are read once in that
//!    order and the streams walked side by side; otherwise once per stream. What each
//!    stream's walk finds (its notes, its break) is kept apart and put together in the
//!    order of the streams' names, so the report is the one a walk of one stream after
//!    the other gives.
//!
//! Memory: per stream, its chain state, its notes and its summary; per file, its length;
//! the prune records; one line. Never the records.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::{VerifyReport, Walker};
use crate::audit::chain::ParsedLine;
use crate::audit::lines::{FileLines, Line, MAX_LINE_BYTES};

/// What the index keeps of the files.
struct Index {
    /// Each file's length as read.
    lengths: Vec<u64>,
    /// Per stream: its first seq in each file that holds it, and the file's index.
    groups: BTreeMap<String, Vec<(u64, usize)>>,
}

/// Checks `files` with `walker` (its heads already added) and finishes the walk.
pub(super) fn verify(walker: &mut Walker<'_>, files: &[PathBuf]) -> std::io::Result<()> {
    let Some(index) = index(walker, files)? else {
        return Ok(());
    };
    let orders: BTreeMap<&str, Vec<usize>> = index
        .groups
        .iter()
        .map(|(stream, groups)| {
            let mut groups = groups.clone();
            groups.sort_unstable();
            (
                stream.as_str(),
                groups.into_iter().map(|(_, file)| file).collect(),
            )
        })
        .collect();
    let mut fragments: BTreeMap<String, VerifyReport> = BTreeMap::new();
    match one_order(files.len(), &orders) {
        Some(order) => {
            if !walk(walker, files, &index.lengths, &order, None, &mut fragments)? {
                return Ok(());
            }
        }
        None => {
            for (stream, order) in &orders {
                if !walk(
                    walker,
                    files,
                    &index.lengths,
                    order,
                    Some(stream),
                    &mut fragments,
                )? {
                    return Ok(());
                }
            }
        }
    }
    for (_, fragment) in fragments {
        walker.report.records += fragment.records;
        walker.report.streams.extend(fragment.streams);
        walker.report.notes.extend(fragment.notes);
        if fragment.first_break.is_some() {
            walker.report.first_break = fragment.first_break;
            return Ok(());
        }
    }
    walker.finish("head file (.querygate_heads)");
    Ok(())
}

/// The `file:line` of a line.
fn location(file: &Path, line: &Line<'_>) -> String {
    format!("{}:{}", file.display(), line.number)
}

/// The first pass: every line checked, the prune records collected. `None` when a line
/// breaks the set (the break is in the walker's report).
fn index(walker: &mut Walker<'_>, files: &[PathBuf]) -> std::io::Result<Option<Index>> {
    let mut index = Index {
        lengths: Vec::with_capacity(files.len()),
        groups: BTreeMap::new(),
    };
    for (file_index, file) in files.iter().enumerate() {
        let mut lines = FileLines::open(file)?;
        let mut firsts: BTreeMap<String, u64> = BTreeMap::new();
        while let Some(line) = lines.next_line()? {
            let location = location(file, &line);
            let text = match (line.oversized, std::str::from_utf8(line.bytes)) {
                (Some(length), _) if !line.torn => {
                    walker.fail(
                        &location,
                        format!(
                            "a line of {length} bytes: longer than any record ({MAX_LINE_BYTES} bytes at most)"
                        ),
                    );
                    return Ok(None);
                }
                (None, Ok(text)) => text,
                (None, Err(err)) if !line.torn => {
                    let at = err.valid_up_to();
                    walker.fail(
                        &location,
                        format!(
                            "not UTF-8: byte 0x{:02x} at column {} (a record cannot hold it; the line was edited)",
                            line.bytes.get(at).copied().unwrap_or_default(),
                            at + 1
                        ),
                    );
                    return Ok(None);
                }
                _ => "",
            };
            if text.trim().is_empty() && !line.torn {
                walker.fail(&location, "an empty line".to_owned());
                return Ok(None);
            }
            match crate::audit::format::parse_line(text) {
                Ok(parsed) => {
                    walker.collect_prune(&location, &parsed);
                    firsts
                        .entry(parsed.stored.stream)
                        .or_insert(parsed.stored.seq);
                }
                Err(_) if line.torn => walker.report.notes.push(format!(
                    "{location}: an incomplete last line (a write cut short); it was acknowledged only if a stream's head names it, which is checked below"
                )),
                Err(err) => {
                    walker.fail(&location, err.to_string());
                    return Ok(None);
                }
            }
        }
        index.lengths.push(lines.consumed());
        for (stream, first) in firsts {
            index
                .groups
                .entry(stream)
                .or_default()
                .push((first, file_index));
        }
    }
    Ok(Some(index))
}

/// One order of the files in which every stream's files come in its own order (the files'
/// order as given where the streams leave a choice), or `None` when the streams disagree.
fn one_order(files: usize, orders: &BTreeMap<&str, Vec<usize>>) -> Option<Vec<usize>> {
    let mut after: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); files];
    let mut before = vec![0usize; files];
    for order in orders.values() {
        for pair in order.windows(2) {
            if after[pair[0]].insert(pair[1]) {
                before[pair[1]] += 1;
            }
        }
    }
    let mut ready: BTreeSet<usize> = (0..files).filter(|f| before[*f] == 0).collect();
    let mut order = Vec::with_capacity(files);
    while let Some(file) = ready.pop_first() {
        order.push(file);
        for next in &after[file] {
            before[*next] -= 1;
            if before[*next] == 0 {
                ready.insert(*next);
            }
        }
    }
    (order.len() == files).then_some(order)
}

/// The second pass over the files in `order` (only the records of `only`, when given): each
/// record stepped in its stream's fragment. `false` when a file no longer holds what the
/// index read (the break is in the walker's report).
fn walk(
    walker: &mut Walker<'_>,
    files: &[PathBuf],
    lengths: &[u64],
    order: &[usize],
    only: Option<&str>,
    fragments: &mut BTreeMap<String, VerifyReport>,
) -> std::io::Result<bool> {
    for &file_index in order {
        let (Some(file), Some(&length)) = (files.get(file_index), lengths.get(file_index)) else {
            continue;
        };
        let mut lines = FileLines::open_upto(file, length)?;
        while let Some(line) = lines.next_line()? {
            let location = location(file, &line);
            let parsed = match std::str::from_utf8(line.bytes)
                .map_err(|err| err.to_string())
                .and_then(|text| {
                    crate::audit::format::parse_line(text).map_err(|err| err.to_string())
                }) {
                Ok(parsed) => parsed,
                // The index noted it: an incomplete last line.
                Err(_) if line.torn => continue,
                Err(err) => {
                    walker.fail(
                        &location,
                        format!("the line changed while it was verified: {err}"),
                    );
                    return Ok(false);
                }
            };
            if only.is_some_and(|only| only != parsed.stored.stream) {
                continue;
            }
            step(walker, fragments, &location, &parsed);
        }
    }
    Ok(true)
}

/// Steps one record in its stream's fragment of the report, unless that stream already
/// broke.
fn step(
    walker: &mut Walker<'_>,
    fragments: &mut BTreeMap<String, VerifyReport>,
    location: &str,
    parsed: &ParsedLine,
) {
    let stream = &parsed.stored.stream;
    if !fragments.contains_key(stream) {
        fragments.insert(stream.clone(), VerifyReport::default());
    }
    let Some(fragment) = fragments.get_mut(stream) else {
        return;
    };
    if fragment.first_break.is_some() {
        return;
    }
    std::mem::swap(&mut walker.report, fragment);
    walker.step(location, parsed);
    std::mem::swap(&mut walker.report, fragment);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::chain::{ChainHead, link};
    use crate::audit::head::{Head, HeadFile};
    use crate::audit::record::AuditRecord;

    /// Two streams whose files come in opposite orders: each stream's files are read in its
    /// own order (a pass each), and a break in the later-named stream is the one reported
    /// only when the earlier-named stream has none.
    #[test]
    fn streams_whose_files_disagree_are_walked_one_by_one() {
        let dir = tempfile::tempdir().unwrap();
        let mut lines: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for stream in ["r1", "r2"] {
            let mut head = ChainHead::genesis();
            for i in 0..6 {
                let record = AuditRecord {
                    tool: format!("tool{i}"),
                    ..Default::default()
                };
                let linked = link(stream, &head, &record, None).unwrap();
                head = linked.head();
                lines.entry(stream).or_default().push(linked.line());
            }
            HeadFile::open(dir.path(), stream)
                .unwrap()
                .write(&Head::new(stream, &head, None))
                .unwrap();
        }
        let write = |name: &str, parts: [&[String]; 2]| {
            let path = dir.path().join(name);
            std::fs::write(&path, format!("{}\n", parts.concat().join("\n"))).unwrap();
            path
        };
        let a = write("a.log", [&lines["r1"][3..], &lines["r2"][..3]]);
        let b = write("b.log", [&lines["r1"][..3], &lines["r2"][3..]]);
        let report = super::super::verify_files(&[a.clone(), b.clone()]).unwrap();
        assert!(report.ok(), "{}", report.render());
        assert_eq!(report.records, 12);
        assert_eq!(report.streams.len(), 2);

        // r2 broken in a.log (first in the files), r1 in b.log: r1's break is reported.
        let mut r2 = lines["r2"].clone();
        r2.remove(1);
        let a = write("a.log", [&lines["r1"][3..], &r2[..2]]);
        let mut r1 = lines["r1"].clone();
        r1.swap(0, 1);
        let b = write("b.log", [&r1[..3], &lines["r2"][3..]]);
        let report = super::super::verify_files(&[a.clone(), b.clone()]).unwrap();
        let found = report.first_break.clone().unwrap();
        assert!(found.location.ends_with("b.log:1"), "{found:?}");
        assert_eq!(report.records, 0, "{}", report.render());
        // With r1 intact, r2's break, after r1's records.
        let b = write("b.log", [&lines["r1"][..3], &lines["r2"][3..]]);
        let report = super::super::verify_files(&[a, b]).unwrap();
        let found = report.first_break.clone().unwrap();
        assert!(found.location.ends_with("a.log:5"), "{found:?}");
        assert!(found.reason.contains("seq 3 follows seq 1"), "{found:?}");
        assert_eq!(report.records, 7, "{}", report.render());
    }

    #[test]
    fn one_order_follows_every_stream_or_none() {
        let orders = BTreeMap::from([("a", vec![1, 0]), ("b", vec![0, 2])]);
        assert_eq!(one_order(3, &orders), Some(vec![1, 0, 2]));
        assert_eq!(one_order(3, &BTreeMap::new()), Some(vec![0, 1, 2]));
        let crossed = BTreeMap::from([("a", vec![1, 0]), ("b", vec![0, 1])]);
        assert_eq!(one_order(2, &crossed), None);
    }
}
