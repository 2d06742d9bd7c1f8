//! `querygate audit verify`: checks a set of audit files, or the `audit_events` table, and
//! reports the first break in any stream's chain: an edited record (its hash no longer
//! matches), a missing or reordered one (the sequence or the predecessor's hash does not
//! follow), or a line that is not a record.
//!
//! A stream whose oldest record is not its first (seq 1 after the genesis hash) "starts
//! mid-chain": older files were pruned by rotation. That is reported, not counted as a break.
//! A file whose last line is incomplete (a write a crash cut short, never acknowledged) is
//! reported the same way.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use futures::TryStreamExt as _;
use sqlx_core::query_as::query_as;
use sqlx_postgres::{PgPool, Postgres};

use super::chain::{self, GENESIS, ParsedLine};

/// What verification found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Records checked.
    pub records: u64,
    /// Per stream: its first and last sequence numbers and last hash.
    pub streams: BTreeMap<String, StreamSummary>,
    /// Things worth knowing that are not breaks (pruned starts, torn last lines).
    pub notes: Vec<String>,
    /// The first break, if any.
    pub first_break: Option<Break>,
}

/// One stream's extent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamSummary {
    /// The first sequence number seen.
    pub first_seq: u64,
    /// The last sequence number seen.
    pub last_seq: u64,
    /// The last record's hash (worth keeping elsewhere: it seals everything before it).
    pub last_hash: String,
}

/// Where and why the chain breaks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Break {
    /// `file:line`, or `stream <s> seq <n>` in the database.
    pub location: String,
    /// What is wrong.
    pub reason: String,
}

impl VerifyReport {
    /// Whether no break was found.
    pub fn ok(&self) -> bool {
        self.first_break.is_none()
    }

    /// The report for a person.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for note in &self.notes {
            out.push_str(&format!("note: {note}\n"));
        }
        for (stream, s) in &self.streams {
            out.push_str(&format!(
                "stream {stream}: seq {}..{}, last hash {}\n",
                s.first_seq, s.last_seq, s.last_hash
            ));
        }
        match &self.first_break {
            None => out.push_str(&format!(
                "ok: {} records in {} streams, no break\n",
                self.records,
                self.streams.len()
            )),
            Some(b) => out.push_str(&format!("BREAK at {}: {}\n", b.location, b.reason)),
        }
        out
    }
}

/// Follows each stream's chain over records given in order.
struct Walker {
    report: VerifyReport,
    heads: BTreeMap<String, (u64, String)>,
}

impl Walker {
    fn new() -> Self {
        Walker {
            report: VerifyReport::default(),
            heads: BTreeMap::new(),
        }
    }

    /// Checks one record; `false` once a break is found.
    fn step(&mut self, location: &str, parsed: &ParsedLine) -> bool {
        let stored = &parsed.stored;
        let expected = self.heads.get(&stored.stream).cloned();
        let problem = match &expected {
            None if stored.seq == 1 && stored.prev_hash == GENESIS => None,
            None if stored.seq == 1 => {
                Some("the stream's first record does not start from the genesis hash".to_owned())
            }
            None => {
                self.report.notes.push(format!(
                    "stream {} starts mid-chain at seq {} ({location}): its earlier records were pruned",
                    stored.stream, stored.seq
                ));
                None
            }
            Some((seq, _)) if stored.seq != seq + 1 => Some(format!(
                "seq {} follows seq {seq} in stream {} (a record is missing, duplicated or out of order)",
                stored.seq, stored.stream
            )),
            Some((_, hash)) if stored.prev_hash != *hash => Some(format!(
                "prev_hash does not match the hash of seq {} in stream {} (a record was replaced)",
                stored.seq - 1,
                stored.stream
            )),
            Some(_) => None,
        };
        if let Some(reason) = problem {
            self.fail(location, reason);
            return false;
        }
        self.report.records += 1;
        self.heads
            .insert(stored.stream.clone(), (stored.seq, parsed.hash.clone()));
        self.report
            .streams
            .entry(stored.stream.clone())
            .and_modify(|s| {
                s.last_seq = stored.seq;
                s.last_hash.clone_from(&parsed.hash);
            })
            .or_insert_with(|| StreamSummary {
                first_seq: stored.seq,
                last_seq: stored.seq,
                last_hash: parsed.hash.clone(),
            });
        true
    }

    fn fail(&mut self, location: &str, reason: String) {
        if self.report.first_break.is_none() {
            self.report.first_break = Some(Break {
                location: location.to_owned(),
                reason,
            });
        }
    }
}

/// One stream's records in one file: the first seq, the file's index, and the records
/// with their `file:line`.
type FileGroup = (u64, usize, Vec<(String, ParsedLine)>);

/// Checks a set of files. Each stream's records are followed in the order of their files
/// (by the first sequence number of the stream in each file) and of the lines within a file.
pub fn verify_files(files: &[PathBuf]) -> std::io::Result<VerifyReport> {
    let mut walker = Walker::new();
    let mut groups: BTreeMap<String, Vec<FileGroup>> = BTreeMap::new();
    for (index, file) in files.iter().enumerate() {
        let text = std::fs::read_to_string(file)?;
        let torn = !text.is_empty() && !text.ends_with('\n');
        let lines: Vec<&str> = text.lines().collect();
        let mut per_stream: BTreeMap<String, Vec<(String, ParsedLine)>> = BTreeMap::new();
        for (n, line) in lines.iter().enumerate() {
            let location = format!("{}:{}", file.display(), n + 1);
            if line.trim().is_empty() {
                walker.fail(&location, "an empty line".to_owned());
                return Ok(walker.report);
            }
            match chain::parse_line(line) {
                Ok(parsed) => per_stream
                    .entry(parsed.stored.stream.clone())
                    .or_default()
                    .push((location, parsed)),
                Err(_) if torn && n + 1 == lines.len() => walker.report.notes.push(format!(
                    "{location}: an incomplete last line (a write cut short by a crash; it was never acknowledged)"
                )),
                Err(err) => {
                    walker.fail(&location, err.to_string());
                    return Ok(walker.report);
                }
            }
        }
        for (stream, records) in per_stream {
            let first = records.first().map_or(0, |(_, p)| p.stored.seq);
            groups
                .entry(stream)
                .or_default()
                .push((first, index, records));
        }
    }
    for (_, mut file_groups) in groups {
        file_groups.sort_by_key(|(first, index, _)| (*first, *index));
        'stream: for (_, _, records) in &file_groups {
            for (location, parsed) in records {
                if !walker.step(location, parsed) {
                    break 'stream;
                }
            }
        }
    }
    Ok(walker.report)
}

/// A row of `audit_events` as verification reads it.
type Row = (String, i64, String, String, String, bool, bool);

/// Checks the `audit_events` table: each stream in sequence order, every record against its
/// hash, and the derived columns against the record.
pub async fn verify_database(pool: &PgPool) -> Result<VerifyReport, sqlx_core::Error> {
    let mut walker = Walker::new();
    let mut rows = query_as::<Postgres, Row>(
        "SELECT stream, seq, record, prev_hash, hash, \
                doc = record::jsonb AS doc_matches, \
                at = (doc ->> 'timestamp')::timestamptz AS at_matches \
         FROM audit_events ORDER BY stream, seq",
    )
    .fetch(pool);
    while let Some((stream, seq, record, prev_hash, hash, doc_matches, at_matches)) =
        rows.try_next().await?
    {
        let location = format!("stream {stream} seq {seq}");
        let parsed = match chain::parse_canonical(&record) {
            Ok(stored) => stored,
            Err(err) => {
                walker.fail(&location, err.to_string());
                break;
            }
        };
        let problem = if chain::hash_of(&record) != hash {
            Some("the record does not match its hash (edited)")
        } else if parsed.stream != stream || i64::try_from(parsed.seq).ok() != Some(seq) {
            Some("the stream or seq columns differ from the record")
        } else if parsed.prev_hash != prev_hash {
            Some("the prev_hash column differs from the record")
        } else if !doc_matches || !at_matches {
            Some("the derived columns differ from the record")
        } else {
            None
        };
        if let Some(reason) = problem {
            walker.fail(&location, reason.to_owned());
            break;
        }
        if !walker.step(
            &location,
            &ParsedLine {
                stored: parsed,
                hash,
            },
        ) {
            break;
        }
    }
    Ok(walker.report)
}

/// The files of a set named on the command line: files as given, folders expanded to the
/// audit files in them.
pub fn expand(paths: &[PathBuf]) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            files.extend(super::location::files_of(
                &super::location::FileLocation::Dir(path.clone()),
            )?);
        } else {
            files.push(Path::new(path).to_path_buf());
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::chain::{ChainHead, link};
    use crate::audit::record::AuditRecord;

    fn lines(stream: &str, n: usize) -> Vec<String> {
        let mut head = ChainHead::genesis();
        (0..n)
            .map(|i| {
                let record = AuditRecord {
                    tool: format!("tool{i}"),
                    ..Default::default()
                };
                let linked = link(stream, &head, &record).unwrap();
                head = linked.head();
                linked.line()
            })
            .collect()
    }

    fn write(dir: &Path, name: &str, lines: &[String]) -> PathBuf {
        let path = dir.join(name);
        let mut text = lines.join("\n");
        text.push('\n');
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn intact_sets_pass_and_pruned_starts_are_noted() {
        let dir = tempfile::tempdir().unwrap();
        let all = lines("r1", 6);
        let a = write(dir.path(), "a.log", &all[..3]);
        let b = write(dir.path(), "b.log", &all[3..]);
        let report = verify_files(&[b.clone(), a]).unwrap();
        assert!(report.ok(), "{}", report.render());
        assert_eq!(report.records, 6);
        let report = verify_files(&[b]).unwrap();
        assert!(report.ok(), "{}", report.render());
        assert!(
            report.notes[0].contains("starts mid-chain at seq 4"),
            "{:?}",
            report.notes
        );
    }

    #[test]
    fn edits_deletions_and_reorders_are_breaks() {
        let dir = tempfile::tempdir().unwrap();
        let all = lines("r1", 5);
        let mut edited = all.clone();
        edited[2] = edited[2].replace("tool2", "tool9");
        let report = verify_files(&[write(dir.path(), "e.log", &edited)]).unwrap();
        let b = report.first_break.unwrap();
        assert!(b.location.ends_with("e.log:3"), "{b:?}");
        assert!(b.reason.contains("edited"), "{b:?}");

        let mut deleted = all.clone();
        deleted.remove(1);
        let report = verify_files(&[write(dir.path(), "d.log", &deleted)]).unwrap();
        let b = report.first_break.unwrap();
        assert!(b.location.ends_with("d.log:2"), "{b:?}");
        assert!(b.reason.contains("seq 3 follows seq 1"), "{b:?}");

        let mut reordered = all.clone();
        reordered.swap(2, 3);
        let report = verify_files(&[write(dir.path(), "r.log", &reordered)]).unwrap();
        let b = report.first_break.unwrap();
        assert!(b.location.ends_with("r.log:3"), "{b:?}");

        // A re-hashed replacement: its own hash fits, the successor's prev_hash does not.
        let after_first = ChainHead {
            seq: 1,
            hash: chain::parse_line(&all[0]).unwrap().hash,
        };
        let forged = AuditRecord {
            tool: "forged".into(),
            ..Default::default()
        };
        let mut mixed = all.clone();
        mixed[1] = link("r1", &after_first, &forged).unwrap().line();
        let report = verify_files(&[write(dir.path(), "f.log", &mixed)]).unwrap();
        let b = report.first_break.unwrap();
        assert!(b.location.ends_with("f.log:3"), "{b:?}");
        assert!(b.reason.contains("prev_hash"), "{b:?}");
    }

    #[test]
    fn a_torn_last_line_is_a_note() {
        let dir = tempfile::tempdir().unwrap();
        let all = lines("r1", 2);
        let path = dir.path().join("t.log");
        std::fs::write(&path, format!("{}\n{}", all[0], &all[1][..20])).unwrap();
        let report = verify_files(&[path]).unwrap();
        assert!(report.ok(), "{}", report.render());
        assert!(report.notes[0].contains("incomplete last line"));
    }
}
