//! `querygate audit verify`: checks a set of audit files, or the `audit_events` table, and
//! reports the first break in any stream: an edited record (its hash no longer matches), a
//! missing or reordered one (the sequence or the predecessor's hash does not follow), a
//! line that is not a record (not UTF-8, not JSON, no hash), and, against the anchors:
//!
//! - with the audit key, a MAC that does not verify (a record forged or rewritten with
//!   recomputed hashes), a record or head without a MAC (stripped, or a stream added by
//!   someone without the key) unless its stream is named by `--allow-unsigned` (written
//!   before the key; then only before its first MACed record), and two heads for one
//!   stream (`verify/mac.rs`);
//! - a stream that ends before its head (the newest records, or the newest file, removed;
//!   a cut that leaves a partial line), a head whose MAC does not verify, a head whose
//!   stream has no record left, a version 2 stream without a head;
//! - a stream that starts after seq 1 (or skips seqs) where no `prune` record names the
//!   records that went: deleted, not pruned (PostgreSQL never prunes; its retention records
//!   cuts instead, `verify/cuts.rs`).
//!
//! Version 1 records (written before pruning was recorded) starting mid-chain, and streams
//! without MACs (verified without a key, or named by `--allow-unsigned`), are reported in
//! notes: what cannot be checked is said, never passed over.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use futures::TryStreamExt as _;
use sqlx_core::query_as::query_as;
use sqlx_postgres::{PgPool, Postgres};

use super::anchor::{MacKey, same_mac};
use super::chain::{self, GENESIS, ParsedLine};
use super::head::{self, Head, HeadTrust};
use super::record::{Phase, Pruned};

mod cuts;
mod mac;
mod stream;

pub use mac::Anchors;

/// What verification found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Records checked.
    pub records: u64,
    /// Per stream: its first and last sequence numbers and last hash.
    pub streams: BTreeMap<String, StreamSummary>,
    /// Things worth knowing that are not breaks (recorded prunings, unanchored streams,
    /// torn last lines).
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
    /// Records whose MAC verified under the audit key.
    pub macs: u64,
    /// The seq its head names, when it has one.
    pub head_seq: Option<u64>,
}

/// Where and why the chain breaks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Break {
    /// `file:line`, `stream <s> seq <n>` in the database, or a head.
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
            let anchoring = if s.macs > 0 {
                "anchored (MACs verified)"
            } else {
                "unanchored (no MAC checked)"
            };
            let head = s
                .head_seq
                .map_or_else(|| "no head".to_owned(), |seq| format!("head seq {seq}"));
            out.push_str(&format!(
                "stream {stream}: seq {}..{}, last hash {}, {anchoring}, {head}\n",
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

/// Where a stream's chain is.
#[derive(Clone, Debug)]
struct StreamState {
    seq: u64,
    hash: String,
    location: String,
    /// A record of the stream carried a valid MAC: every later one must.
    anchored: bool,
    version: u32,
}

/// A `prune` record's word for one stream, and where it is.
#[derive(Clone, Debug)]
struct PruneEntry {
    pruned: Pruned,
    location: String,
}

/// Follows each stream's chain over records given in order, against the anchors.
struct Walker<'k> {
    report: VerifyReport,
    key: Option<&'k MacKey>,
    anchors: Anchors<'k>,
    /// PostgreSQL: nothing is ever pruned.
    never_prunes: bool,
    states: BTreeMap<String, StreamState>,
    prunes: BTreeMap<String, Vec<PruneEntry>>,
    heads: BTreeMap<String, (String, Head)>,
    unanchored: BTreeMap<String, u64>,
    /// PostgreSQL: what retention removed.
    cuts: cuts::Cuts,
}

impl<'k> Walker<'k> {
    fn new(anchors: Anchors<'k>, never_prunes: bool) -> Self {
        Walker {
            report: VerifyReport::default(),
            key: anchors.key,
            anchors,
            never_prunes,
            states: BTreeMap::new(),
            prunes: BTreeMap::new(),
            heads: BTreeMap::new(),
            unanchored: BTreeMap::new(),
            cuts: cuts::Cuts::default(),
        }
    }

    /// Whether the record's MAC verifies (`None`: no MAC, or no key to check it).
    fn mac_valid(&self, parsed: &ParsedLine) -> Option<bool> {
        let (key, mac) = (self.key?, parsed.mac.as_ref()?);
        Some(same_mac(mac, &key.record_mac(&parsed.hash)))
    }

    /// Takes note of a `prune` record (counted only when its MAC verifies, with a key).
    fn collect_prune(&mut self, location: &str, parsed: &ParsedLine) {
        if parsed.stored.record.phase != Phase::Prune
            || (self.key.is_some() && self.mac_valid(parsed) != Some(true))
        {
            return;
        }
        for (stream, pruned) in parsed.stored.record.pruned.iter().flatten() {
            self.prunes
                .entry(stream.clone())
                .or_default()
                .push(PruneEntry {
                    pruned: pruned.clone(),
                    location: location.to_owned(),
                });
        }
    }

    /// The prune record that names `seq`/`hash` as the last record of `stream` that went.
    fn pruned_through(&self, stream: &str, seq: u64, hash: &str) -> Option<&PruneEntry> {
        self.prunes
            .get(stream)?
            .iter()
            .find(|e| e.pruned.seq == seq && e.pruned.hash == hash)
    }

    fn add_head(&mut self, location: String, head: Result<Head, String>) -> bool {
        let head = match head {
            Ok(head) => head,
            Err(why) => {
                self.fail(&location, format!("the stream head is unreadable: {why}"));
                return false;
            }
        };
        if head.trust(self.key) == HeadTrust::Invalid {
            self.fail(
                &location,
                format!(
                    "the head of stream {} (seq {}, written {}) does not verify under audit.mac_key_file: forged, edited or rewound",
                    head.stream, head.seq, head.at
                ),
            );
            return false;
        }
        if let Some((first_location, first)) = self.heads.get(&head.stream) {
            let reason = mac::two_heads(first_location, first, &location, &head);
            self.fail(&location, reason);
            return false;
        }
        self.heads.insert(head.stream.clone(), (location, head));
        true
    }

    /// Checks one record; `false` once a break is found.
    #[expect(
        clippy::too_many_lines,
        reason = "one record's checks in the chain's order (MAC, sequence, version, pruning, prev_hash, head), all reading and updating the same stream state"
    )]
    fn step(&mut self, location: &str, parsed: &ParsedLine) -> bool {
        let stored = &parsed.stored;
        let state = self.states.get(&stored.stream).cloned();
        let anchored_before = state.as_ref().is_some_and(|s| s.anchored);
        let mac = self.mac_valid(parsed);
        let mac_problem = match mac {
            Some(false) => Some(
                "the record's MAC does not verify under audit.mac_key_file (forged with a recomputed hash, or written under another key)"
                    .to_owned(),
            ),
            None => self
                .anchors
                .unsigned_record(&stored.stream, stored.seq, anchored_before),
            Some(true) => None,
        };
        if let Some(reason) = mac_problem {
            self.fail(location, reason);
            return false;
        }
        let problem = match &state {
            None if stored.seq == 1 && stored.prev_hash == GENESIS => None,
            None if stored.seq == 1 => {
                Some("the stream's first record does not start from the genesis hash".to_owned())
            }
            None => self.mid_chain_start(location, stored),
            Some(s) if stored.v < s.version => Some(format!(
                "a version {} record after version {} records in stream {} (a downgrade)",
                stored.v, s.version, stored.stream
            )),
            Some(s) if stored.seq > s.seq + 1 && self.cuts.has(&stored.stream) => {
                self.cut_gap(&stored.stream, s.seq + 1, stored.seq - 1, &stored.prev_hash)
            }
            Some(s) if stored.seq > s.seq + 1 => {
                match self.pruned_through(&stored.stream, stored.seq - 1, &stored.prev_hash) {
                    Some(entry) => {
                        let note = format!(
                            "stream {}: seq {}..{} were pruned (recorded at {})",
                            stored.stream,
                            s.seq + 1,
                            stored.seq - 1,
                            entry.location
                        );
                        self.report.notes.push(note);
                        None
                    }
                    _ => Some(format!(
                        "seq {} follows seq {} in stream {} (a record is missing, duplicated or out of order; no prune record names the gap)",
                        stored.seq, s.seq, stored.stream
                    )),
                }
            }
            Some(s) if stored.seq != s.seq + 1 => Some(format!(
                "seq {} follows seq {} in stream {} (a record is missing, duplicated or out of order)",
                stored.seq, s.seq, stored.stream
            )),
            Some(s) if stored.prev_hash != s.hash => Some(format!(
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
        if let Some((head_location, head)) = self.heads.get(&stored.stream)
            && head.seq == stored.seq
            && head.hash != parsed.hash
        {
            let reason = format!(
                "the record at seq {} differs from the one its stream's head names ({head_location}): the stream was rewritten",
                stored.seq
            );
            self.fail(location, reason);
            return false;
        }
        let valid_mac = mac == Some(true);
        if !valid_mac {
            *self.unanchored.entry(stored.stream.clone()).or_default() += 1;
        }
        self.report.records += 1;
        self.states.insert(
            stored.stream.clone(),
            StreamState {
                seq: stored.seq,
                hash: parsed.hash.clone(),
                location: location.to_owned(),
                anchored: anchored_before || valid_mac,
                version: stored.v,
            },
        );
        self.report
            .streams
            .entry(stored.stream.clone())
            .and_modify(|s| {
                s.last_seq = stored.seq;
                s.last_hash.clone_from(&parsed.hash);
                s.macs += u64::from(valid_mac);
            })
            .or_insert_with(|| StreamSummary {
                first_seq: stored.seq,
                last_seq: stored.seq,
                last_hash: parsed.hash.clone(),
                macs: u64::from(valid_mac),
                head_seq: None,
            });
        true
    }

    /// A stream's oldest record is not seq 1: a note when a prune record names what went
    /// (or the records predate recorded pruning), else the reason it breaks.
    fn mid_chain_start(&mut self, location: &str, stored: &chain::Stored) -> Option<String> {
        if let Some(entry) = self.pruned_through(&stored.stream, stored.seq - 1, &stored.prev_hash)
        {
            let note = format!(
                "stream {} starts at seq {} ({location}): seq 1..{} were pruned (recorded at {})",
                stored.stream,
                stored.seq,
                stored.seq - 1,
                entry.location
            );
            self.report.notes.push(note);
            return None;
        }
        if self.cuts.has(&stored.stream) {
            return self.cut_gap(&stored.stream, 1, stored.seq - 1, &stored.prev_hash);
        }
        if self.never_prunes {
            return Some(format!(
                "stream {} starts at seq {}: its oldest records were deleted (PostgreSQL never prunes)",
                stored.stream, stored.seq
            ));
        }
        if stored.v < 2 {
            self.report.notes.push(format!(
                "stream {} starts mid-chain at seq {} ({location}): version 1 records, written before pruning was recorded, so pruning cannot be told from deletion",
                stored.stream, stored.seq
            ));
            return None;
        }
        Some(format!(
            "stream {} starts at seq {} but no prune record names seq 1..{}: its oldest records were deleted, not pruned",
            stored.stream,
            stored.seq,
            stored.seq - 1
        ))
    }

    /// After the walk: each stream against its head, heads without records, unanchored
    /// streams.
    fn finish(&mut self, head_kind: &str) {
        if !self.report.ok() {
            return;
        }
        let heads = std::mem::take(&mut self.heads);
        for (stream, (head_location, head)) in &heads {
            if let Some(reason) = self.anchors.unsigned_head(head) {
                self.fail(head_location, reason);
                return;
            }
            let tail = match self.states.get(stream) {
                Some(state) if state.seq < head.seq => Some(state.seq + 1),
                Some(_) => None,
                None => Some(1),
            };
            if let Some(from) = tail.filter(|_| self.cuts.has(stream)) {
                if let Some(reason) = self.cut_gap(stream, from, head.seq, &head.hash) {
                    self.fail(head_location, reason);
                    return;
                }
                if let Some(summary) = self.report.streams.get_mut(stream) {
                    summary.head_seq = Some(head.seq);
                }
                continue;
            }
            match self.states.get(stream) {
                Some(state) if state.seq < head.seq => {
                    let reason = format!(
                        "stream {stream} ends at seq {} but its head ({head_location}, written {}) names seq {}: acknowledged records after it were removed",
                        state.seq, head.at, head.seq
                    );
                    let location = state.location.clone();
                    self.fail(&location, reason);
                    return;
                }
                Some(state) => {
                    if state.anchored && head.mac.is_none() {
                        self.fail(
                            head_location,
                            format!(
                                "the head of anchored stream {stream} has no MAC (replaced by someone without the audit key)"
                            ),
                        );
                        return;
                    }
                    if state.seq > head.seq {
                        self.report.notes.push(format!(
                            "stream {stream}: seq {}..{} come after its head (seq {}): written by a process that stopped before updating its head (never acknowledged), or after a power loss within the head's sync interval",
                            head.seq + 1,
                            state.seq,
                            head.seq
                        ));
                    }
                    if let Some(summary) = self.report.streams.get_mut(stream) {
                        summary.head_seq = Some(head.seq);
                    }
                }
                None => {
                    let pruned = self
                        .prunes
                        .get(stream)
                        .is_some_and(|e| e.iter().any(|e| e.pruned.seq >= head.seq));
                    if !pruned {
                        self.fail(
                            head_location,
                            format!(
                                "stream {stream} has a head at seq {} (written {}) but none of its records: they were deleted (or their files were not given)",
                                head.seq, head.at
                            ),
                        );
                        return;
                    }
                }
            }
        }
        for (stream, state) in &self.states {
            if state.version >= 2 && !heads.contains_key(stream) {
                let location = state.location.clone();
                self.fail(
                    &location,
                    format!("stream {stream} has no {head_kind}: it was deleted"),
                );
                return;
            }
        }
        if let Err((location, reason)) = self.cuts.finish() {
            self.fail(&location, reason);
            return;
        }
        self.note_unverified(&heads);
    }

    /// The notes a passing walk ends with: streams whose records carry no verified MAC, and
    /// streams the anchor does not know.
    fn note_unverified(&mut self, heads: &BTreeMap<String, (String, Head)>) {
        let unanchored: Vec<String> = self
            .unanchored
            .iter()
            .map(|(stream, n)| format!("{stream} ({n})"))
            .collect();
        if !unanchored.is_empty() {
            let why = if self.key.is_some() {
                "written before audit.mac_key_file was set (--allow-unsigned)"
            } else {
                "no audit.mac_key_file to check MACs with"
            };
            self.report.notes.push(format!(
                "records without a verified MAC, {why}: {}; their chains show edits, not a rewrite with recomputed hashes",
                unanchored.join(", ")
            ));
        }
        if let Some(note) = self
            .anchors
            .unknown_streams(|s| self.states.contains_key(s) || heads.contains_key(s))
        {
            self.report.notes.push(note);
        }
    }

    /// Seqs `from..=to` of `stream` are missing, `link` the hash of seq `to`: a note when
    /// retention cuts cover them, else why it breaks.
    fn cut_gap(&mut self, stream: &str, from: u64, to: u64, link: &str) -> Option<String> {
        match self.cuts.gap(stream, from, to, link) {
            Ok(note) => {
                self.report.notes.push(note);
                None
            }
            Err(reason) => Some(reason),
        }
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

/// [`verify_files_with`] without an audit key.
pub fn verify_files(files: &[PathBuf]) -> std::io::Result<VerifyReport> {
    verify_files_with(files, None)
}

/// Checks a set of files, MACs under `key` when given, and each stream against its head
/// (in `.querygate_heads` of the files' folders). Each stream's records are followed in the
/// order of their files (by the first sequence number of the stream in each file) and of
/// the lines within a file. The files are read a line at a time, in memory that does not
/// grow with their size (`verify/stream.rs`).
pub fn verify_files_with(files: &[PathBuf], key: Option<&MacKey>) -> std::io::Result<VerifyReport> {
    verify_files_against(files, Anchors::key(key))
}

/// [`verify_files_with`] against `anchors`: the key, and the streams that may be unsigned.
pub fn verify_files_against(
    files: &[PathBuf],
    anchors: Anchors<'_>,
) -> std::io::Result<VerifyReport> {
    let mut walker = Walker::new(anchors, false);
    let folders: BTreeSet<PathBuf> = files
        .iter()
        .map(|f| {
            f.parent()
                .filter(|p| !p.as_os_str().is_empty())
                .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
        })
        .collect();
    for folder in &folders {
        for (path, head) in head::read_all(folder)? {
            if !walker.add_head(path.display().to_string(), head) {
                return Ok(walker.report);
            }
        }
    }
    stream::verify(&mut walker, files)?;
    Ok(walker.report)
}

/// A row of `audit_events` as verification reads it.
type Row = (
    String,
    i64,
    String,
    String,
    String,
    Option<String>,
    bool,
    bool,
);

/// A row of `audit_heads`.
type HeadRow = (String, i64, String, String, Option<String>);

/// [`verify_database_with`] without an audit key.
pub async fn verify_database(pool: &PgPool) -> Result<VerifyReport, sqlx_core::Error> {
    verify_database_with(pool, None).await
}

/// Checks the `audit_events` table: each stream in sequence order, every record against its
/// hash (and MAC under `key`), the derived columns against the record, and each stream
/// against its row in `audit_heads`. Seqs missing from a stream are a break unless the
/// retention cuts of `audit_retention_cuts` name them (`verify/cuts.rs`): the database is
/// never pruned, only cut by retention.
pub async fn verify_database_with(
    pool: &PgPool,
    key: Option<&MacKey>,
) -> Result<VerifyReport, sqlx_core::Error> {
    verify_database_against(pool, Anchors::key(key)).await
}

/// [`verify_database_with`] against `anchors`: the key, and the streams that may be
/// unsigned.
pub async fn verify_database_against(
    pool: &PgPool,
    anchors: Anchors<'_>,
) -> Result<VerifyReport, sqlx_core::Error> {
    let mut walker = Walker::new(anchors, true);
    let heads = query_as::<Postgres, HeadRow>(
        "SELECT stream, seq, hash, at, mac FROM audit_heads ORDER BY stream",
    )
    .fetch_all(pool)
    .await?;
    for (stream, seq, hash, at, mac) in heads {
        let head = Head {
            stream: stream.clone(),
            seq: u64::try_from(seq).unwrap_or(0),
            hash,
            at,
            mac,
        };
        if !walker.add_head(format!("audit_heads stream {stream}"), Ok(head)) {
            return Ok(walker.report);
        }
    }
    match cuts::Cuts::load(pool, walker.key, &mut walker.report.notes).await? {
        Ok(cuts) => walker.cuts = cuts,
        Err((location, reason)) => {
            walker.fail(&location, reason);
            return Ok(walker.report);
        }
    }
    let mut rows = query_as::<Postgres, Row>(
        "SELECT stream, seq, record, prev_hash, hash, mac, \
                doc = record::jsonb AS doc_matches, \
                at = (doc ->> 'timestamp')::timestamptz AS at_matches \
         FROM audit_events ORDER BY stream, seq",
    )
    .fetch(pool);
    while let Some((stream, seq, record, prev_hash, hash, mac, doc_matches, at_matches)) =
        rows.try_next().await?
    {
        let location = format!("stream {stream} seq {seq}");
        let parsed = match chain::parse_canonical(&record) {
            Ok(stored) => stored,
            Err(err) => {
                walker.fail(&location, err.to_string());
                return Ok(walker.report);
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
            return Ok(walker.report);
        }
        if !walker.step(
            &location,
            &ParsedLine {
                stored: parsed,
                hash,
                mac,
            },
        ) {
            return Ok(walker.report);
        }
    }
    walker.finish("row in audit_heads");
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
    use crate::audit::head::HeadFile;
    use crate::audit::record::AuditRecord;

    fn key() -> MacKey {
        MacKey::new(&[5u8; 32]).unwrap()
    }

    fn record(i: usize) -> AuditRecord {
        AuditRecord {
            tool: format!("tool{i}"),
            ..Default::default()
        }
    }

    /// `n` linked lines of `stream` and the head after them.
    fn chained(stream: &str, n: usize, key: Option<&MacKey>) -> (Vec<String>, ChainHead) {
        let mut head = ChainHead::genesis();
        let lines = (0..n)
            .map(|i| {
                let linked = link(stream, &head, &record(i), key).unwrap();
                head = linked.head();
                linked.line()
            })
            .collect();
        (lines, head)
    }

    fn lines(stream: &str, n: usize) -> Vec<String> {
        chained(stream, n, None).0
    }

    fn write(dir: &Path, name: &str, lines: &[String]) -> PathBuf {
        let path = dir.join(name);
        let mut text = lines.join("\n");
        text.push('\n');
        std::fs::write(&path, text).unwrap();
        path
    }

    fn write_head(dir: &Path, stream: &str, head: &ChainHead, key: Option<&MacKey>) {
        HeadFile::open(dir, stream)
            .unwrap()
            .write(&Head::new(stream, head, key))
            .unwrap();
    }

    fn broken(report: VerifyReport) -> Break {
        let render = report.render();
        report
            .first_break
            .unwrap_or_else(|| panic!("no break: {render}"))
    }

    #[test]
    fn intact_sets_pass_and_unrecorded_pruning_is_a_break() {
        let dir = tempfile::tempdir().unwrap();
        let (all, head) = chained("r1", 6, None);
        let a = write(dir.path(), "a.log", &all[..3]);
        let b = write(dir.path(), "b.log", &all[3..]);
        write_head(dir.path(), "r1", &head, None);
        let report = verify_files(&[b.clone(), a]).unwrap();
        assert!(report.ok(), "{}", report.render());
        assert_eq!(report.records, 6);
        assert_eq!(report.streams["r1"].head_seq, Some(6));
        let b = broken(verify_files(&[b]).unwrap());
        assert!(b.location.ends_with("b.log:1"), "{b:?}");
        assert!(
            b.reason
                .contains("starts at seq 4 but no prune record names seq 1..3"),
            "{b:?}"
        );
    }

    #[test]
    fn version_1_streams_starting_mid_chain_are_a_note() {
        let dir = tempfile::tempdir().unwrap();
        let old: Vec<String> = lines("r1", 4)
            .iter()
            .map(|l| {
                // Re-hashed as version 1 (the format before this one).
                let body = l[..l.len() - 75].replacen("{\"v\":2,", "{\"v\":1,", 1);
                let canonical = format!("{body}}}");
                format!("{body},\"hash\":\"{}\"}}", chain::hash_of(&canonical))
            })
            .collect();
        // The links of a v1 chain (prev_hash) are not checked across re-hashing here:
        // only the last record, a stream starting mid-chain.
        let report = verify_files(&[write(dir.path(), "v1.log", &old[3..])]).unwrap();
        assert!(report.ok(), "{}", report.render());
        assert!(
            report.notes[0].contains("starts mid-chain at seq 4")
                && report.notes[0].contains("version 1"),
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
        let b = broken(verify_files(&[write(dir.path(), "e.log", &edited)]).unwrap());
        assert!(b.location.ends_with("e.log:3"), "{b:?}");
        assert!(b.reason.contains("edited"), "{b:?}");

        let mut deleted = all.clone();
        deleted.remove(1);
        let b = broken(verify_files(&[write(dir.path(), "d.log", &deleted)]).unwrap());
        assert!(b.location.ends_with("d.log:2"), "{b:?}");
        assert!(b.reason.contains("seq 3 follows seq 1"), "{b:?}");

        let mut reordered = all.clone();
        reordered.swap(2, 3);
        let b = broken(verify_files(&[write(dir.path(), "r.log", &reordered)]).unwrap());
        assert!(b.location.ends_with("r.log:3"), "{b:?}");

        // A re-hashed replacement: its own hash fits, the successor's prev_hash does not.
        let after_first = ChainHead {
            seq: 1,
            hash: crate::audit::format::parse_line(&all[0]).unwrap().hash,
        };
        let forged = AuditRecord {
            tool: "forged".into(),
            ..Default::default()
        };
        let mut mixed = all.clone();
        mixed[1] = link("r1", &after_first, &forged, None).unwrap().line();
        let b = broken(verify_files(&[write(dir.path(), "f.log", &mixed)]).unwrap());
        assert!(b.location.ends_with("f.log:3"), "{b:?}");
        assert!(b.reason.contains("prev_hash"), "{b:?}");
    }

    #[test]
    fn macs_catch_recomputed_chains_and_stripped_macs() {
        let dir = tempfile::tempdir().unwrap();
        let key = key();
        let (all, head) = chained("r1", 4, Some(&key));
        let path = write(dir.path(), "m.log", &all);
        write_head(dir.path(), "r1", &head, Some(&key));
        let report = verify_files_with(std::slice::from_ref(&path), Some(&key)).unwrap();
        assert!(report.ok(), "{}", report.render());
        assert_eq!(report.streams["r1"].macs, 4);
        // The same files under another key: the first record already fails.
        let other = MacKey::new(&[6u8; 32]).unwrap();
        let b = broken(verify_files_with(std::slice::from_ref(&path), Some(&other)).unwrap());
        assert!(b.reason.contains("does not verify"), "{b:?}");
        // Forged records appended with recomputed hashes, with or without a (wrong) MAC.
        for forger_key in [None, Some(&other)] {
            let forged = link("r1", &head, &record(9), forger_key).unwrap();
            let mut tampered = all.clone();
            tampered.push(forged.line());
            let path = write(dir.path(), "m.log", &tampered);
            let b = broken(verify_files_with(&[path], Some(&key)).unwrap());
            assert!(b.location.ends_with("m.log:5"), "{b:?}");
            assert!(b.reason.contains("MAC"), "{b:?}");
        }
        // Without the key, verify says it could not check.
        let report = verify_files(&[write(dir.path(), "m.log", &all)]).unwrap();
        assert!(report.ok(), "{}", report.render());
        assert!(
            report
                .notes
                .iter()
                .any(|n| n.contains("no audit.mac_key_file")),
            "{:?}",
            report.notes
        );
    }

    #[test]
    fn heads_catch_removed_newest_records_and_forged_heads() {
        let dir = tempfile::tempdir().unwrap();
        let key = key();
        let (all, head) = chained("r1", 5, Some(&key));
        write_head(dir.path(), "r1", &head, Some(&key));
        let path = write(dir.path(), "h.log", &all[..3]);
        let b = broken(verify_files_with(std::slice::from_ref(&path), Some(&key)).unwrap());
        assert!(b.location.ends_with("h.log:3"), "{b:?}");
        assert!(
            b.reason.contains("ends at seq 3 but its head") && b.reason.contains("names seq 5"),
            "{b:?}"
        );
        // A rewound head that the forger wrote without the key.
        let rewound = ChainHead {
            seq: 3,
            hash: crate::audit::format::parse_line(&all[2]).unwrap().hash,
        };
        write_head(
            dir.path(),
            "r1",
            &rewound,
            Some(&MacKey::new(&[9u8; 32]).unwrap()),
        );
        let b = broken(verify_files_with(std::slice::from_ref(&path), Some(&key)).unwrap());
        assert!(b.location.ends_with("r1.head"), "{b:?}");
        assert!(b.reason.contains("does not verify"), "{b:?}");
        write_head(dir.path(), "r1", &rewound, None);
        let b = broken(verify_files_with(std::slice::from_ref(&path), Some(&key)).unwrap());
        assert!(b.reason.contains("has no MAC"), "{b:?}");
        // A head whose stream has no records left; a v2 stream without a head.
        write_head(dir.path(), "r1", &head, Some(&key));
        let other = write(dir.path(), "o.log", &chained("r2", 2, Some(&key)).0);
        let b = broken(verify_files_with(std::slice::from_ref(&other), Some(&key)).unwrap());
        assert!(b.reason.contains("stream r1 has a head at seq 5"), "{b:?}");
        std::fs::remove_file(head::head_path(dir.path(), "r1")).unwrap();
        let b = broken(verify_files_with(&[other], Some(&key)).unwrap());
        assert!(b.reason.contains("stream r2 has no head file"), "{b:?}");
    }

    #[test]
    fn recorded_pruning_explains_a_later_start() {
        let dir = tempfile::tempdir().unwrap();
        let key = key();
        let (old, after_old) = chained("r1", 3, Some(&key));
        let pruned_through = crate::audit::format::parse_line(&old[2]).unwrap();
        let prune = AuditRecord {
            phase: Phase::Prune,
            pruned: Some(BTreeMap::from([(
                "r1".to_owned(),
                Pruned {
                    seq: 3,
                    hash: pruned_through.hash.clone(),
                },
            )])),
            ..Default::default()
        };
        let prune_line = link("r1", &after_old, &prune, Some(&key)).unwrap();
        let path = write(
            dir.path(),
            "p.log",
            std::slice::from_ref(&prune_line.line()),
        );
        write_head(dir.path(), "r1", &prune_line.head(), Some(&key));
        let report = verify_files_with(std::slice::from_ref(&path), Some(&key)).unwrap();
        assert!(report.ok(), "{}", report.render());
        assert!(
            report.notes[0].contains("seq 1..3 were pruned (recorded at"),
            "{:?}",
            report.notes
        );
        // A prune record without a valid MAC excuses nothing: it is a break under the key,
        // and, in a stream allowed to be unsigned, it names no pruning.
        let forged = link("r1", &after_old, &prune, None).unwrap();
        let path = write(dir.path(), "p.log", &[forged.line()]);
        let b = broken(verify_files_with(std::slice::from_ref(&path), Some(&key)).unwrap());
        assert!(b.reason.contains("stream r1 seq 4 has no MAC"), "{b:?}");
        let allowed = BTreeSet::from(["r1".to_owned()]);
        let anchors = Anchors {
            key: Some(&key),
            allow_unsigned: Some(&allowed),
        };
        let b = broken(verify_files_against(&[path], anchors).unwrap());
        assert!(b.reason.contains("no prune record"), "{b:?}");
    }

    #[test]
    fn torn_lines_and_bytes_that_are_not_utf8_are_located() {
        let dir = tempfile::tempdir().unwrap();
        let (all, head) = chained("r1", 2, None);
        let path = dir.path().join("t.log");
        std::fs::write(&path, format!("{}\n{}", all[0], &all[1][..20])).unwrap();
        // The head names seq 1: the cut line was never acknowledged.
        let first = ChainHead {
            seq: 1,
            hash: crate::audit::format::parse_line(&all[0]).unwrap().hash,
        };
        write_head(dir.path(), "r1", &first, None);
        let report = verify_files(std::slice::from_ref(&path)).unwrap();
        assert!(
            report.notes[0].contains("incomplete last line"),
            "{:?}",
            report.notes
        );
        assert!(report.ok(), "{}", report.render());
        // The head names seq 2: an acknowledged record was cut.
        write_head(dir.path(), "r1", &head, None);
        let b = broken(verify_files(std::slice::from_ref(&path)).unwrap());
        assert!(b.location.ends_with("t.log:1"), "{b:?}");
        assert!(
            b.reason
                .contains("acknowledged records after it were removed"),
            "{b:?}"
        );

        let mut bytes = format!("{}\n", all[0]).into_bytes();
        bytes.extend_from_slice(&all[1].as_bytes()[..30]);
        bytes.push(0xff);
        bytes.extend_from_slice(&all[1].as_bytes()[30..]);
        bytes.push(b'\n');
        std::fs::write(&path, bytes).unwrap();
        let b = broken(verify_files(&[path]).unwrap());
        assert!(b.location.ends_with("t.log:2"), "{b:?}");
        assert!(b.reason.contains("byte 0xff at column 31"), "{b:?}");
    }
}
