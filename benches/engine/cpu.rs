//! Per-thread CPU time from /proc, and the probe that keeps the counters of threads that exit.

use super::*;

pub(crate) fn current_tid() -> Result<u32> {
    let link = std::fs::read_link("/proc/thread-self").context("reading /proc/thread-self")?;
    link.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| anyhow!("unexpected /proc/thread-self target {}", link.display()))
}

pub(crate) fn parse_schedstat(text: &str) -> Option<u64> {
    text.split_ascii_whitespace().next()?.parse().ok()
}

pub(crate) fn thread_cpu_ns(tid: u32) -> Option<u64> {
    parse_schedstat(&std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?)
}

pub(crate) fn thread_ids() -> Result<Vec<u32>> {
    let mut tids = Vec::new();
    for entry in std::fs::read_dir("/proc/self/task")? {
        if let Some(tid) = entry?.file_name().to_str().and_then(|n| n.parse().ok()) {
            tids.push(tid);
        }
    }
    Ok(tids)
}

/// procfs reports a running thread's `sum_exec_runtime` as of its last deschedule or tick
/// (4 ms at HZ=250); blocking briefly brings the calling thread's own counter up to date.
pub(crate) fn settle() {
    std::thread::sleep(Duration::from_micros(50));
}

pub(crate) fn cpu_snapshot() -> Result<HashMap<u32, u64>> {
    settle();
    Ok(thread_ids()?
        .into_iter()
        .filter_map(|tid| Some((tid, thread_cpu_ns(tid)?)))
        .collect())
}

/// utime + stime of the whole process in clock ticks (includes exited threads).
pub(crate) fn process_stat_ticks() -> Result<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| anyhow!("odd /proc/self/stat"))?;
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    // After "pid (comm)": state is field 3, utime 14, stime 15 (1-based) → indices 11, 12.
    let utime: u64 = fields
        .get(11)
        .ok_or_else(|| anyhow!("short /proc/self/stat"))?
        .parse()?;
    let stime: u64 = fields
        .get(12)
        .ok_or_else(|| anyhow!("short /proc/self/stat"))?
        .parse()?;
    Ok(utime + stime)
}

pub(crate) struct CpuSample {
    /// CPU of all threads except the excluded ones and the probe.
    pub(crate) cpu_ns: u64,
    /// CPU of the excluded threads (the mock).
    pub(crate) excluded_ns: u64,
    /// Threads that exited during the query, and their CPU (included in `cpu_ns`).
    pub(crate) exited: usize,
    pub(crate) exited_ns: u64,
    /// The probe thread's own CPU.
    pub(crate) probe_ns: u64,
}

pub(crate) struct CpuProbe {
    pub(crate) before: HashMap<u32, u64>,
    pub(crate) excluded: Vec<u32>,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) handle: JoinHandle<Result<ProbeResult>>,
    pub(crate) probe_tid: u32,
}

pub(crate) struct ProbeResult {
    pub(crate) last_seen: HashMap<u32, u64>,
    pub(crate) own_ns: u64,
}

/// Polls threads that appear after `start` so that CPU of threads exiting before `finish`
/// is still counted (up to one poll interval is lost per exiting thread).
pub(crate) const POLL: Duration = Duration::from_micros(250);
pub(crate) const LIST_EVERY: u32 = 4;
pub(crate) const MAX_POLLS: u32 = 240_000; // 60 s

impl CpuProbe {
    pub(crate) fn start(excluded: &[u32]) -> Result<CpuProbe> {
        let stop = Arc::new(AtomicBool::new(false));
        let (tid_tx, tid_rx) = mpsc::channel();
        let known: HashSet<u32> = thread_ids()?.into_iter().collect();
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("bench-cpu-probe".into())
            .spawn(move || {
                let me = current_tid()?;
                tid_tx
                    .send(me)
                    .map_err(|_| anyhow!("probe owner went away"))?;
                probe_loop(me, &known, &flag)
            })?;
        let probe_tid = tid_rx
            .recv_timeout(Duration::from_secs(5))
            .context("probe did not start")?;
        // Snapshot after the probe exists so that its start-up is not attributed to anything.
        let before = cpu_snapshot()?;
        Ok(CpuProbe {
            before,
            excluded: excluded.to_vec(),
            stop,
            handle,
            probe_tid,
        })
    }

    pub(crate) fn finish(self) -> Result<CpuSample> {
        let after = cpu_snapshot()?;
        self.stop.store(true, Ordering::Relaxed);
        let probed = self
            .handle
            .join()
            .map_err(|_| anyhow!("probe thread panicked"))??;
        let mut last = probed.last_seen;
        let (mut exited, mut exited_ns) = (0, 0);
        for (tid, ns) in &last {
            if !after.contains_key(tid) {
                exited += 1;
                exited_ns += ns.saturating_sub(self.before.get(tid).copied().unwrap_or(0));
            }
        }
        last.extend(after);
        let (mut cpu_ns, mut excluded_ns) = (0, 0);
        for (tid, ns) in last {
            if tid == self.probe_tid {
                continue;
            }
            let delta = ns.saturating_sub(self.before.get(&tid).copied().unwrap_or(0));
            if self.excluded.contains(&tid) {
                excluded_ns += delta;
            } else {
                cpu_ns += delta;
            }
        }
        Ok(CpuSample {
            cpu_ns,
            exited,
            exited_ns,
            excluded_ns,
            probe_ns: probed.own_ns,
        })
    }
}

pub(crate) fn probe_loop(me: u32, known: &HashSet<u32>, stop: &AtomicBool) -> Result<ProbeResult> {
    let mut open: Vec<(u32, File)> = Vec::new();
    let mut last_seen = HashMap::new();
    let mut watched: HashSet<u32> = HashSet::new();
    let mut buf = String::with_capacity(64);
    for poll in 0..MAX_POLLS {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        if poll % LIST_EVERY == 0 {
            for tid in thread_ids()? {
                if tid != me
                    && !known.contains(&tid)
                    && watched.insert(tid)
                    && let Ok(file) = File::open(format!("/proc/self/task/{tid}/schedstat"))
                {
                    open.push((tid, file));
                }
            }
        }
        open.retain_mut(|(tid, file)| {
            buf.clear();
            let read = file
                .seek(SeekFrom::Start(0))
                .and_then(|_| file.read_to_string(&mut buf));
            match read.ok().and_then(|_| parse_schedstat(&buf)) {
                Some(ns) => {
                    last_seen.insert(*tid, ns);
                    true
                }
                None => false, // the thread has exited
            }
        });
        std::thread::sleep(POLL);
    }
    let own_ns = thread_cpu_ns(me).unwrap_or(0);
    Ok(ProbeResult { last_seen, own_ns })
}

// ---------------------------------------------------------------------------------------
// Reporting helpers
// ---------------------------------------------------------------------------------------
