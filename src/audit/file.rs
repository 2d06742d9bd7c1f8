//! The file sink: JSON Lines, one record per line, hash-chained, fsynced before a write is
//! acknowledged. One writer thread owns the file (the pattern of the SQLite thread in
//! `engine/eval`): callers queue records and await a reply; the thread takes everything
//! queued, appends it in one write, calls `fdatasync` once and then answers them all, so
//! concurrent calls share an fsync (group commit; see `group` for how long a batch waits
//! for the callers the last commits released: never longer than a commit takes).
//!
//! Several processes may write one folder at once (stdio sessions of two desktop windows,
//! a client that starts a process per call): in a `dir` they share the day's file
//! ([`location::file_for`]), each batch is appended under an exclusive `flock` of the file,
//! and each process chains its records in a stream of its own (`FileSink::start_fresh`),
//! so the chains interleave in the file and each stays linear. Under the lock a torn last
//! line (a writer that died mid-write) is cut before appending (the last byte is read only
//! when the file no longer ends where this writer's last append ended), and a file that
//! another process rotated away or that was deleted is left for the current one.
//!
//! After every batch the stream's head ([`super::head`]: the last seq and hash, MACed under
//! the audit key when there is one) is overwritten beside the files before the callers are
//! answered (a process that dies keeps it: it is in the page cache), and synced when the
//! writer has been idle for [`HEAD_SYNC_AFTER`], under a steady load at most
//! [`HEAD_SYNC_AT_MOST`] after it changed, before a pruning and at close (one more `fdatasync` per batch would cost the sink most of its
//! throughput), and with a key every line carries a MAC ([`super::anchor`]). Files
//! that rotation deletes are first named in a `prune` record (per stream, the last record
//! that goes), so `audit verify` can tell pruning from deletion.
//!
//! Files are created 0600 in folders created 0700, on the first record (a start that is
//! refused leaves no empty file: the folder is checked with a probe file that is removed).
//! A failed write is rolled back (the file truncated to where the batch began, under the
//! lock) and every caller of the batch gets the error; the next record tries again,
//! reopening the file, so a sink that comes back is used again.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read as _, Seek as _, SeekFrom, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use futures::future::BoxFuture;
use tokio::sync::oneshot;

use super::anchor::MacKey;
use super::batch::{LinkedBatch, fail_all};
use super::chain::{self, ChainHead};
use super::format::Format;
use super::group::GroupCommit;
use super::head::{self, Head, HeadFile, HeadTrust};
use super::location::{self, FileLocation};
use super::queue::{Job, WriterQueue};
use super::record::{AuditRecord, Phase, Pruned};
use super::sink::{AuditError, AuditSink, Receipt};

/// The most records one fsync covers.
const MAX_BATCH: usize = 4096;

/// A head written is synced once the writer has been idle this long.
pub const HEAD_SYNC_AFTER: Duration = Duration::from_millis(50);

/// Under a steady load, a head written is synced at most this long after it changed.
pub const HEAD_SYNC_AT_MOST: Duration = Duration::from_secs(1);

/// How the file sink writes and rotates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileSinkConfig {
    /// `path` or `dir`.
    pub location: FileLocation,
    /// The stream (replica) the records are chained in.
    pub stream: String,
    /// Rotate once the current file has this many bytes (0: never).
    pub max_size: u64,
    /// Files kept at most, the current one included (0: all).
    pub max_files: usize,
    /// Rotated files older than this are deleted (`None`: kept).
    pub max_age: Option<Duration>,
    /// The audit key: every record and the head are MACed under it (`None`: unanchored).
    pub mac_key: Option<MacKey>,
    /// How each record is written: JSONL or an OTLP/JSON LogRecord (`audit.format`).
    pub format: Format,
}

/// The JSONL file sink.
pub struct FileSink {
    queue: WriterQueue<mpsc::Sender<Job>>,
    first_file: PathBuf,
}

impl std::fmt::Debug for FileSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSink")
            .field("file", &self.first_file)
            .finish()
    }
}

impl FileSink {
    /// Opens the sink: creates the folder (0700), checks that it is writable, finds where
    /// the stream's chain left off, and starts the writer thread. Fails when the location
    /// is not writable.
    pub fn start(config: FileSinkConfig) -> Result<FileSink, AuditError> {
        FileSink::open(config, false)
    }

    /// [`FileSink::start`] for a stream no file has yet (a name unique to this process):
    /// its chain starts at the genesis hash without reading the files.
    pub fn start_fresh(config: FileSinkConfig) -> Result<FileSink, AuditError> {
        FileSink::open(config, true)
    }

    fn open(config: FileSinkConfig, fresh: bool) -> Result<FileSink, AuditError> {
        let dir = match &config.location {
            FileLocation::Dir(dir) => dir.clone(),
            FileLocation::Path(path) => path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .map_or_else(|| PathBuf::from("."), Path::to_path_buf),
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|err| {
                unavailable(
                    format!("cannot create audit folder '{}'", dir.display()),
                    err,
                )
            })?;
        let head = if fresh {
            ChainHead::genesis()
        } else {
            let found = find_head(&config.location, &config.stream)?;
            after_stored_head(&dir, &config, found)?
        };
        let mut writer = Writer {
            dir,
            path: PathBuf::new(),
            file: None,
            size: 0,
            own_end: None,
            day: String::new(),
            head,
            head_file: None,
            head_unsynced: None,
            fresh_file_needed: false,
            config,
        };
        writer.open_initial()?;
        let first_file = writer.path.clone();
        let (jobs, receiver) = mpsc::channel::<Job>();
        let (stopped_tx, stopped) = oneshot::channel();
        std::thread::Builder::new()
            .name("querygate-audit-file".to_owned())
            .spawn(move || {
                writer.run(receiver);
                let _ = stopped_tx.send(());
            })
            .map_err(|err| unavailable("cannot start the audit writer thread".to_owned(), err))?;
        Ok(FileSink {
            queue: WriterQueue::new(jobs, stopped),
            first_file,
        })
    }

    /// The file the sink writes its first records to (created with the first record).
    pub fn first_file(&self) -> &Path {
        &self.first_file
    }
}

impl AuditSink for FileSink {
    fn write(&self, record: AuditRecord) -> BoxFuture<'_, Result<Receipt, AuditError>> {
        self.queue.write(record)
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        self.queue.close()
    }

    fn describe(&self) -> String {
        format!("file {}", self.first_file.display())
    }

    fn kind(&self) -> &'static str {
        "file"
    }
}

fn unavailable(what: String, err: std::io::Error) -> AuditError {
    AuditError::Unavailable(format!("{what}: {err}"))
}

struct Writer {
    config: FileSinkConfig,
    dir: PathBuf,
    path: PathBuf,
    file: Option<File>,
    /// The length of the file where the current batch begins (read under the lock).
    size: u64,
    /// Where the open file ended after this writer's last append, whose last byte is a
    /// newline. The file only grows after it (other processes append, or cut back no further
    /// than that), so while it is still this long its last line is complete, unread.
    own_end: Option<u64>,
    /// The UTC day (`YYYYMMDD`) of `path` in a `dir`.
    day: String,
    head: ChainHead,
    /// The stream's head file (opened with the first batch).
    head_file: Option<HeadFile>,
    /// Since when the head file holds a head not yet synced.
    head_unsynced: Option<Instant>,
    /// A failed write could not be rolled back: the next batch goes to a new file.
    fresh_file_needed: bool,
}

impl Writer {
    fn run(&mut self, receiver: mpsc::Receiver<Job>) {
        let mut group = GroupCommit::default();
        loop {
            let received = match self.head_unsynced {
                Some(_) => match receiver.recv_timeout(HEAD_SYNC_AFTER) {
                    Ok(job) => Some(job),
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        self.sync_head();
                        continue;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => None,
                },
                None => receiver.recv().ok(),
            };
            let Some(first) = received else {
                break;
            };
            let mut batch = vec![first];
            take_queued(&receiver, &mut batch);
            if let Some(gather) = group.plan(MAX_BATCH) {
                let deadline = Instant::now() + gather.window;
                while batch.len() < gather.target {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    match receiver.recv_timeout(left.min(gather.quiet)) {
                        Ok(job) => {
                            batch.push(job);
                            take_queued(&receiver, &mut batch);
                        }
                        Err(_) => break,
                    }
                }
            }
            group.observe(batch.len());
            let started = Instant::now();
            self.write_batch(batch);
            group.committed(started.elapsed());
            if self
                .head_unsynced
                .is_some_and(|since| since.elapsed() >= HEAD_SYNC_AT_MOST)
            {
                self.sync_head();
            }
        }
        if let Some(file) = &self.file {
            let _ = file.sync_all();
        }
        self.sync_head();
    }

    /// Syncs the head file when it holds a head not yet synced.
    fn sync_head(&mut self) {
        if self.head_unsynced.take().is_none() {
            return;
        }
        if let Some(file) = &self.head_file
            && let Err(err) = file.sync()
        {
            tracing::error!(
                "cannot sync the audit head '{}': {err}",
                file.path().display()
            );
        }
    }

    fn write_batch(&mut self, batch: Vec<Job>) {
        if let Err(err) = self.prepare_file() {
            fail_all(batch, &err);
            return;
        }
        let mut buffer = Vec::with_capacity(batch.len() * 512);
        let (format, stream) = (self.config.format, self.config.stream.as_str());
        let linked = LinkedBatch::link(
            &self.config.stream,
            self.head.clone(),
            self.config.mac_key.as_ref(),
            batch,
            |linked, record| {
                format.write_line(stream, &linked, record, &mut buffer);
                buffer.push(b'\n');
            },
        );
        if linked.is_empty() {
            return;
        }
        let mut appended = self.append_locked(&buffer);
        if appended
            .as_ref()
            .is_err_and(|err| err.kind() == ErrorKind::NotFound)
        {
            // The file was rotated away by another process (or deleted) before the lock
            // was ours: nothing was written; once more, to the current file.
            appended = self
                .prepare_file()
                .map_err(|err| std::io::Error::other(err.to_string()))
                .and_then(|()| self.append_locked(&buffer));
        }
        match appended {
            Ok(()) => {
                self.size += buffer.len() as u64;
                // The records are in the file: the chain goes on after them whatever the
                // head does; callers are answered only once the head names them too.
                self.head = linked.head().clone();
                match self.write_head() {
                    Ok(()) => {
                        linked.acknowledge();
                    }
                    Err(err) => {
                        tracing::error!("{err}");
                        linked.fail(&err);
                    }
                }
            }
            Err(err) => {
                let err = unavailable(format!("cannot write '{}'", self.path.display()), err);
                tracing::error!("{err}");
                linked.fail(&err);
            }
        }
    }

    /// Appends `bytes` and syncs them under an exclusive lock of the file, so processes
    /// sharing it never interleave within a line; a failed write is rolled back before the
    /// lock is let go.
    fn append_locked(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let file = self
            .file
            .as_mut()
            .ok_or_else(|| std::io::Error::other("the audit file is not open"))?;
        file.lock()?;
        let written = locked_append(file, &self.path, bytes, self.own_end.take());
        let result = match written {
            Ok(start) => {
                self.size = start;
                self.own_end = Some(start + bytes.len() as u64);
                Ok(())
            }
            Err((start, err)) => {
                if let Some(start) = start {
                    self.size = start;
                    self.roll_back();
                } else if let Some(file) = self.file.take() {
                    // Nothing was written: reopen for the next batch.
                    let _ = file.unlock();
                }
                Err(err)
            }
        };
        if let Some(file) = &self.file {
            let _ = file.unlock();
        }
        result
    }

    /// After a failed write (the lock held): cut the file back to where the batch began,
    /// or, when that fails, leave it for a new file; the lock is let go and the file
    /// reopened for the next batch.
    fn roll_back(&mut self) {
        let size = self.size;
        let rolled = self
            .file
            .as_mut()
            .is_some_and(|file| file.set_len(size).and_then(|()| file.sync_data()).is_ok());
        if let Some(file) = self.file.take() {
            let _ = file.unlock();
        }
        if !rolled {
            self.fresh_file_needed = true;
        }
    }

    /// Makes sure a file is open for the next batch: reopens after a failure, moves to the
    /// day's file in a `dir`, follows a file moved or deleted (by a rotation of another
    /// process, or by hand), rotates when the current file is full.
    fn prepare_file(&mut self) -> Result<(), AuditError> {
        if self.fresh_file_needed {
            self.rotate()?;
            self.fresh_file_needed = false;
            return Ok(());
        }
        if let FileLocation::Dir(dir) = &self.config.location {
            let now = SystemTime::now();
            let day = location::day_utc(now);
            if day != self.day {
                self.file = None;
                self.path = location::file_for(dir, now, self.config.max_size);
                self.day = day;
            }
        }
        match self.file.as_ref().map(|file| still_at(file, &self.path)) {
            // Other processes may have appended since.
            Some(Some(length)) => self.size = length,
            Some(None) => {
                tracing::info!(
                    "audit file '{}' was moved or deleted; writing to the current file",
                    self.path.display()
                );
                self.file = None;
                if let FileLocation::Dir(dir) = &self.config.location {
                    self.path = location::file_for(dir, SystemTime::now(), self.config.max_size);
                }
                self.open_current()?;
            }
            None => self.open_current()?,
        }
        if self.config.max_size > 0 && self.size >= self.config.max_size {
            self.rotate()?;
        }
        Ok(())
    }

    fn open_initial(&mut self) -> Result<(), AuditError> {
        match &self.config.location {
            FileLocation::Path(path) => {
                self.path = path.clone();
                self.open_current()
            }
            FileLocation::Dir(dir) => {
                // Writable? A probe file, removed again: the day's file is created with the
                // first record, so a start refused later leaves no empty file.
                tempfile::Builder::new()
                    .prefix(".querygate_audit_probe")
                    .tempfile_in(dir)
                    .map_err(|err| {
                        unavailable(
                            format!("cannot write audit folder '{}'", dir.display()),
                            err,
                        )
                    })?;
                let now = SystemTime::now();
                self.path = location::file_for(dir, now, self.config.max_size);
                self.day = location::day_utc(now);
                Ok(())
            }
        }
    }

    /// Opens `self.path` for appending, cutting a torn last line (a write a crash
    /// interrupted: it was never acknowledged).
    fn open_current(&mut self) -> Result<(), AuditError> {
        let path = self.path.clone();
        let what = || format!("cannot open audit file '{}'", path.display());
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(|err| unavailable(what(), err))?;
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .open(&path)
            .map_err(|err| unavailable(what(), err))?;
        file.lock().map_err(|err| unavailable(what(), err))?;
        let cut = file
            .metadata()
            .and_then(|meta| cut_torn_line(&mut file, &path, meta.len(), None));
        let _ = file.unlock();
        let size = cut.map_err(|err| unavailable(what(), err))?;
        sync_dir(&self.dir);
        self.file = Some(file);
        self.size = size;
        self.own_end = None;
        Ok(())
    }

    fn create_new(&mut self) -> Result<(), AuditError> {
        let path = self.path.clone();
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|err| {
                unavailable(
                    format!("cannot create audit file '{}'", path.display()),
                    err,
                )
            })?;
        sync_dir(&self.dir);
        self.file = Some(file);
        self.size = 0;
        self.own_end = None;
        Ok(())
    }

    fn rotate(&mut self) -> Result<(), AuditError> {
        self.file = None;
        let now = SystemTime::now();
        match self.config.location.clone() {
            FileLocation::Dir(dir) => {
                // The next file, or the one another process has rotated to already.
                let next = location::file_for(&dir, now, self.config.max_size);
                self.path = if next == self.path {
                    location::file_for(&dir, now, 1)
                } else {
                    next
                };
                self.open_current()?;
            }
            FileLocation::Path(path) => {
                if path.exists() {
                    let rotated = location::rotated_name(&path, now);
                    std::fs::rename(&path, &rotated).map_err(|err| {
                        unavailable(
                            format!("cannot rotate audit file '{}'", path.display()),
                            err,
                        )
                    })?;
                }
                self.path = path;
                self.create_new()?;
            }
        }
        self.prune(now);
        Ok(())
    }

    /// Overwrites the stream's head file with the current head (opening it the first time).
    fn write_head(&mut self) -> Result<(), AuditError> {
        let what = || {
            format!(
                "cannot write the audit head '{}'",
                head::head_path(&self.dir, &self.config.stream).display()
            )
        };
        if self.head_file.is_none() {
            let file = HeadFile::open(&self.dir, &self.config.stream)
                .map_err(|err| unavailable(what(), err))?;
            self.head_file = Some(file);
        }
        let head = Head::new(
            &self.config.stream,
            &self.head,
            self.config.mac_key.as_ref(),
        );
        let written = self
            .head_file
            .as_mut()
            .map_or(Ok(()), |file| file.write(&head));
        match written {
            Ok(()) => {
                self.head_unsynced.get_or_insert_with(Instant::now);
                Ok(())
            }
            Err(err) => {
                // Reopen the next time.
                self.head_file = None;
                Err(unavailable(what(), err))
            }
        }
    }

    /// Links one record of the writer's own (a `prune`) into the stream and appends it
    /// durably, head included.
    fn append_own(&mut self, record: &AuditRecord) -> Result<(), AuditError> {
        let linked = chain::link(
            &self.config.stream,
            &self.head,
            record,
            self.config.mac_key.as_ref(),
        )
        .map_err(|err| AuditError::Encode(err.to_string()))?;
        let mut bytes = Vec::new();
        self.config
            .format
            .write_line(&self.config.stream, &linked, record, &mut bytes);
        bytes.push(b'\n');
        self.append_locked(&bytes)
            .map_err(|err| unavailable(format!("cannot write '{}'", self.path.display()), err))?;
        self.size += bytes.len() as u64;
        self.head = linked.head();
        self.write_head()?;
        // Files are deleted next: the head naming the prune record must be durable first.
        let synced = self.head_file.as_ref().map_or(Ok(()), HeadFile::sync);
        self.head_unsynced = None;
        synced.map_err(|err| unavailable("cannot sync the audit head".to_owned(), err))
    }

    /// Deletes the oldest files past `max_files` and rotated files past `max_age`, once a
    /// `prune` record naming what they hold is durable (files it cannot read, or all of
    /// them when the record cannot be written, are kept).
    fn prune(&mut self, now: SystemTime) {
        let Ok(files) = location::files_of(&self.config.location) else {
            return;
        };
        let older: Vec<&PathBuf> = files.iter().filter(|f| **f != self.path).collect();
        let mut doomed: Vec<&PathBuf> = Vec::new();
        if self.config.max_files > 0 && older.len() + 1 > self.config.max_files {
            doomed.extend(&older[..older.len() + 1 - self.config.max_files]);
        }
        if let Some(max_age) = self.config.max_age {
            for file in &older {
                let old = std::fs::metadata(file)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|modified| now.duration_since(modified).ok())
                    .is_some_and(|age| age > max_age);
                if old && !doomed.contains(file) {
                    doomed.push(file);
                }
            }
        }
        let mut pruned: BTreeMap<String, Pruned> = BTreeMap::new();
        let mut readable: Vec<PathBuf> = Vec::new();
        for file in doomed {
            match last_records(file) {
                Ok(last) => {
                    for (stream, p) in last {
                        let entry = pruned.entry(stream).or_insert_with(|| p.clone());
                        if p.seq > entry.seq {
                            *entry = p;
                        }
                    }
                    readable.push(file.clone());
                }
                Err(err) => {
                    tracing::warn!(
                        "cannot read old audit file '{}' (kept): {err}",
                        file.display()
                    );
                }
            }
        }
        if readable.is_empty() {
            return;
        }
        let record = AuditRecord {
            timestamp: super::record::timestamp(now),
            phase: Phase::Prune,
            call_id: super::record::new_call_id(),
            replica: self.config.stream.clone(),
            pruned: Some(pruned),
            ..Default::default()
        };
        if let Err(err) = self.append_own(&record) {
            tracing::warn!("cannot record the pruning of old audit files (kept): {err}");
            return;
        }
        for file in readable {
            if let Err(err) = std::fs::remove_file(&file) {
                tracing::warn!("cannot delete old audit file '{}': {err}", file.display());
            }
        }
    }
}

/// Moves what is queued into `batch`, up to [`MAX_BATCH`] records.
fn take_queued(receiver: &mpsc::Receiver<Job>, batch: &mut Vec<Job>) {
    while batch.len() < MAX_BATCH {
        match receiver.try_recv() {
            Ok(job) => batch.push(job),
            Err(_) => break,
        }
    }
}

/// The open `file`'s length while `path` still names it; `None` when it was moved away or
/// deleted (or either cannot be read).
fn still_at(file: &File, path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt as _;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(open), Ok(named)) if open.dev() == named.dev() && open.ino() == named.ino() => {
            Some(open.len())
        }
        _ => None,
    }
}

fn sync_dir(dir: &Path) {
    if let Ok(dir) = File::open(dir) {
        let _ = dir.sync_all();
    }
}

/// Under the lock: cuts a torn last line (a write a crash cut short, never acknowledged)
/// from the file of length `len`; returns where the next line begins. A file that still ends
/// at `own_end` (see `Writer::own_end`) is not read.
fn cut_torn_line(
    file: &mut File,
    path: &Path,
    len: u64,
    own_end: Option<u64>,
) -> std::io::Result<u64> {
    if len == 0 || own_end == Some(len) {
        return Ok(len);
    }
    let mut last = [0u8; 1];
    file.seek(SeekFrom::Start(len - 1))?;
    file.read_exact(&mut last)?;
    if last[0] == b'\n' {
        return Ok(len);
    }
    let size = complete_length(file)?;
    tracing::warn!(
        "audit file '{}' ended with an incomplete line of {} bytes (a write cut by a crash, never acknowledged); removed",
        path.display(),
        len - size
    );
    file.set_len(size)?;
    file.sync_data()?;
    Ok(size)
}

/// Under the lock: makes sure `path` still names `file` and its last line is complete,
/// then appends `bytes` and syncs them. `Ok`: where the batch began; `Err`: that (when
/// something may have been written) and the error.
fn locked_append(
    file: &mut File,
    path: &Path,
    bytes: &[u8],
    own_end: Option<u64>,
) -> Result<u64, (Option<u64>, std::io::Error)> {
    let Some(len) = still_at(file, path) else {
        return Err((
            None,
            std::io::Error::new(ErrorKind::NotFound, "the audit file was moved or deleted"),
        ));
    };
    let start = cut_torn_line(file, path, len, own_end).map_err(|err| (None, err))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_data())
        .map_err(|err| (Some(start), err))?;
    Ok(start)
}

/// The length of the file up to and including its last newline.
fn complete_length(file: &mut File) -> std::io::Result<u64> {
    let len = file.metadata()?.len();
    let mut end = len;
    let mut chunk = vec![0u8; 64 * 1024];
    while end > 0 {
        let start = end.saturating_sub(chunk.len() as u64);
        let n = (end - start) as usize;
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut chunk[..n])?;
        if let Some(pos) = chunk[..n].iter().rposition(|b| *b == b'\n') {
            return Ok(start + pos as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

/// Per stream, the last record (highest seq) in `file`.
fn last_records(file: &Path) -> std::io::Result<BTreeMap<String, Pruned>> {
    let bytes = std::fs::read(file)?;
    let mut last: BTreeMap<String, Pruned> = BTreeMap::new();
    for line in bytes.split(|b| *b == b'\n') {
        let Ok(line) = std::str::from_utf8(line) else {
            continue;
        };
        if let Ok(parsed) = crate::audit::format::parse_line(line) {
            let stored = parsed.stored;
            let entry = last.entry(stored.stream).or_default();
            if stored.seq > entry.seq {
                *entry = Pruned {
                    seq: stored.seq,
                    hash: parsed.hash,
                };
            }
        }
    }
    Ok(last)
}

/// Where a restarted server's chain goes on: after `found` (the files' last record of the
/// stream), or after the head file when that is further (the newest records are gone: the
/// chain continues after them, so the gap stays visible rather than being written over).
/// A head whose MAC does not verify stops the start: it was forged or edited, or the key
/// changed.
fn after_stored_head(
    dir: &Path,
    config: &FileSinkConfig,
    found: ChainHead,
) -> Result<ChainHead, AuditError> {
    let path = head::head_path(dir, &config.stream);
    let stored = match head::read(&path) {
        Ok(Some(Ok(stored))) => stored,
        Ok(None) => return Ok(found),
        Ok(Some(Err(why))) => {
            return Err(AuditError::Unavailable(format!(
                "the audit head '{}' is unreadable ({why}): check the files with `querygate audit verify`, then move it aside",
                path.display()
            )));
        }
        Err(err) => {
            return Err(unavailable(
                format!("cannot read '{}'", path.display()),
                err,
            ));
        }
    };
    if stored.stream != config.stream || stored.trust(config.mac_key.as_ref()) == HeadTrust::Invalid
    {
        return Err(AuditError::Unavailable(format!(
            "the audit head '{}' does not verify under audit.mac_key_file (forged, edited, or another key): check the files with `querygate audit verify`, then move it aside",
            path.display()
        )));
    }
    if stored.seq > found.seq {
        tracing::error!(
            "audit stream {}: its head names seq {} but the files end at seq {}: records were removed; continuing after the head",
            config.stream,
            stored.seq,
            found.seq
        );
        return Ok(stored.chain_head());
    }
    Ok(found)
}

/// Where the stream's chain left off: the last complete record of the stream in the
/// newest file that has one.
fn find_head(location: &FileLocation, stream: &str) -> Result<ChainHead, AuditError> {
    let files = match location::files_of(location) {
        Ok(files) => files,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(ChainHead::genesis()),
        Err(err) => return Err(unavailable("cannot list the audit files".to_owned(), err)),
    };
    for file in files.iter().rev() {
        let text = std::fs::read_to_string(file).map_err(|err| {
            unavailable(format!("cannot read audit file '{}'", file.display()), err)
        })?;
        let complete = text.rfind('\n').map_or("", |end| &text[..end]);
        for line in complete.lines().rev() {
            if let Ok(parsed) = crate::audit::format::parse_line(line)
                && parsed.stored.stream == stream
            {
                return Ok(ChainHead {
                    seq: parsed.stored.seq,
                    hash: parsed.hash,
                });
            }
        }
    }
    Ok(ChainHead::genesis())
}
