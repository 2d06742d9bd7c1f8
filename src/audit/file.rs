//! The file sink: JSON Lines, one record per line, hash-chained, fsynced before a write is
//! acknowledged. One writer thread owns the file (the pattern of the SQLite thread in
//! `engine/eval`): callers queue records and await a reply; the thread takes everything
//! queued, appends it in one write, calls `fdatasync` once and then answers them all, so
//! concurrent calls share an fsync (group commit; see `group` for how long a batch waits
//! for the callers the last commits released).
//!
//! Files are created 0600 in folders created 0700. A failed write is rolled back (the file
//! truncated to where the batch began) and every caller of the batch gets the error; the
//! next record tries again, reopening the file, so a sink that comes back is used again.

use std::fs::{File, OpenOptions};
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use futures::future::BoxFuture;
use tokio::sync::oneshot;

use super::batch::{LinkedBatch, fail_all};
use super::chain::{self, ChainHead};
use super::group::{GATHER_QUIET, GATHER_WINDOW, GroupCommit};
use super::location::{self, FileLocation};
use super::queue::{Job, WriterQueue};
use super::record::AuditRecord;
use super::sink::{AuditError, AuditSink, Receipt};

/// The most records one fsync covers.
const MAX_BATCH: usize = 4096;

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
    /// Opens the sink: creates the folder (0700) and the file (0600), finds where the
    /// stream's chain left off, and starts the writer thread. Fails when the location is
    /// not writable.
    pub fn start(config: FileSinkConfig) -> Result<FileSink, AuditError> {
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
        let head = find_head(&config.location, &config.stream)?;
        let mut writer = Writer {
            dir,
            path: PathBuf::new(),
            file: None,
            size: 0,
            head,
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

    /// The file the sink opened at start.
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
    size: u64,
    head: ChainHead,
    /// A failed write could not be rolled back: the next batch goes to a new file.
    fresh_file_needed: bool,
}

impl Writer {
    fn run(&mut self, receiver: mpsc::Receiver<Job>) {
        let mut group = GroupCommit::default();
        while let Ok(first) = receiver.recv() {
            let mut batch = vec![first];
            take_queued(&receiver, &mut batch);
            if let Some(target) = group.target(MAX_BATCH) {
                let deadline = Instant::now() + GATHER_WINDOW;
                while batch.len() < target {
                    let left = deadline.saturating_duration_since(Instant::now());
                    match receiver.recv_timeout(left.min(GATHER_QUIET)) {
                        Ok(job) => {
                            batch.push(job);
                            take_queued(&receiver, &mut batch);
                        }
                        Err(_) => break,
                    }
                }
            }
            group.observe(batch.len());
            self.write_batch(batch);
        }
        if let Some(file) = &self.file {
            let _ = file.sync_all();
        }
    }

    fn write_batch(&mut self, batch: Vec<Job>) {
        if let Err(err) = self.prepare_file() {
            fail_all(batch, &err);
            return;
        }
        let mut buffer = Vec::with_capacity(batch.len() * 512);
        let linked = LinkedBatch::link(
            &self.config.stream,
            self.head.clone(),
            batch,
            |linked, _| {
                buffer.extend_from_slice(linked.line().as_bytes());
                buffer.push(b'\n');
            },
        );
        if linked.is_empty() {
            return;
        }
        match self.append(&buffer) {
            Ok(()) => {
                self.size += buffer.len() as u64;
                self.head = linked.acknowledge();
            }
            Err(err) => {
                let err = unavailable(format!("cannot write '{}'", self.path.display()), err);
                tracing::error!("{err}");
                self.roll_back();
                linked.fail(&err);
            }
        }
    }

    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let file = self
            .file
            .as_mut()
            .ok_or_else(|| std::io::Error::other("the audit file is not open"))?;
        file.write_all(bytes)?;
        file.sync_data()
    }

    /// After a failed write: cut the file back to the last acknowledged record, or, when
    /// that fails, leave it for a new file.
    fn roll_back(&mut self) {
        let size = self.size;
        let rolled = self
            .file
            .as_mut()
            .is_some_and(|file| file.set_len(size).and_then(|()| file.sync_data()).is_ok());
        self.file = None;
        if !rolled {
            self.fresh_file_needed = true;
        }
    }

    /// Makes sure a file is open for the next batch: reopens after a failure, rotates when
    /// the current file is full.
    fn prepare_file(&mut self) -> Result<(), AuditError> {
        if self.fresh_file_needed {
            self.rotate()?;
            self.fresh_file_needed = false;
            return Ok(());
        }
        if let Some(file) = &self.file
            && !still_at(file, &self.path)
        {
            tracing::warn!(
                "audit file '{}' was moved or deleted; writing to a new file at that path",
                self.path.display()
            );
            self.file = None;
        }
        if self.file.is_none() {
            self.open_current()?;
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
                self.path = location::new_file_in(dir, SystemTime::now());
                self.create_new()
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
        let size = complete_length(&mut file).map_err(|err| unavailable(what(), err))?;
        let len = file
            .metadata()
            .map_err(|err| unavailable(what(), err))?
            .len();
        if size < len {
            tracing::warn!(
                "audit file '{}' ended with an incomplete line of {} bytes (a write cut by a crash, never acknowledged); removed",
                path.display(),
                len - size
            );
            file.set_len(size)
                .and_then(|()| file.sync_data())
                .map_err(|err| unavailable(what(), err))?;
        }
        sync_dir(&self.dir);
        self.file = Some(file);
        self.size = size;
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
        Ok(())
    }

    fn rotate(&mut self) -> Result<(), AuditError> {
        self.file = None;
        let now = SystemTime::now();
        match self.config.location.clone() {
            FileLocation::Dir(dir) => {
                self.path = location::new_file_in(&dir, now);
                self.create_new()?;
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

    /// Deletes the oldest files past `max_files` and rotated files past `max_age`.
    fn prune(&self, now: SystemTime) {
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
        for file in doomed {
            if let Err(err) = std::fs::remove_file(file) {
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

/// Whether `path` still names the open `file` (not moved away or deleted).
fn still_at(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(open), Ok(named)) => open.dev() == named.dev() && open.ino() == named.ino(),
        _ => false,
    }
}

fn sync_dir(dir: &Path) {
    if let Ok(dir) = File::open(dir) {
        let _ = dir.sync_all();
    }
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
            if let Ok(parsed) = chain::parse_line(line)
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
