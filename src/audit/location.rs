//! Where the file sink writes: a fixed `path`, or a `dir` with one file per UTC day
//! (`querygate_audit_<YYYYMMDD>.log`, `-1`, `-2`… after a rotation; every process writing
//! the folder shares it), and which files make up a set. Files of the older per-start
//! naming (`querygate_audit_<YYYYMMDDTHHMMSSZ>.log`) belong to the set too.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The prefix of files the sink names itself.
pub const FILE_PREFIX: &str = "querygate_audit_";
/// Their extension.
pub const FILE_EXTENSION: &str = "log";

/// `audit.file.path` or `audit.file.dir`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileLocation {
    /// One file, appended to across restarts; rotated files sit beside it as
    /// `<stem>-<UTC>.<ext>`.
    Path(PathBuf),
    /// A folder: one file per UTC day, shared by every process, and a new one at each
    /// rotation.
    Dir(PathBuf),
}

/// The default folder: `$XDG_STATE_HOME/querygate/audit`, else
/// `$HOME/.local/state/querygate/audit`, else `./querygate-audit`.
pub fn default_dir(env: &HashMap<String, String>) -> PathBuf {
    let non_empty = |key: &str| env.get(key).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(state) = non_empty("XDG_STATE_HOME") {
        return state.join("querygate").join("audit");
    }
    if let Some(home) = non_empty("HOME") {
        return home.join(".local/state/querygate/audit");
    }
    PathBuf::from("querygate-audit")
}

/// `YYYYMMDDTHHMMSSZ` of `at`, in UTC.
pub fn compact_utc(at: SystemTime) -> String {
    // humantime gives `2026-11-30T11:30:01Z`; keep the digits, the T and the Z.
    humantime::format_rfc3339_seconds(at)
        .to_string()
        .chars()
        .filter(|c| c.is_ascii_digit() || *c == 'T' || *c == 'Z')
        .collect()
}

/// `YYYYMMDD` of `at`, in UTC.
pub fn day_utc(at: SystemTime) -> String {
    compact_utc(at).chars().take(8).collect()
}

/// The file of `dir` the records of `at` go to: the newest audit file when it was started
/// the same UTC day and is not full (`max_size` bytes; 0: never full), else a new name that
/// sorts after every file there: `querygate_audit_<YYYYMMDD>.log`, then `-1`, `-2`… (or, when
/// a file of the older per-start naming of that day sorts after those, a per-start name
/// `querygate_audit_<YYYYMMDDTHHMMSSZ>.log`). Every process writing `dir` picks the same
/// file, so a day of short sessions is one file.
pub fn file_for(dir: &Path, at: SystemTime, max_size: u64) -> PathBuf {
    let existing = files_of(&FileLocation::Dir(dir.to_owned())).unwrap_or_default();
    let day = day_utc(at);
    if let Some(newest) = existing.last() {
        let of_today = newest
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix(FILE_PREFIX))
            .is_some_and(|rest| rest.starts_with(&day));
        let full = max_size > 0 && std::fs::metadata(newest).is_ok_and(|m| m.len() >= max_size);
        if of_today && !full {
            return newest.clone();
        }
    }
    let daily = next_name(
        dir,
        &format!("{FILE_PREFIX}{day}"),
        FILE_EXTENSION,
        &existing,
    );
    match existing.last() {
        Some(newest) if start_key(&daily) <= start_key(newest) => next_name(
            dir,
            &format!("{FILE_PREFIX}{}", compact_utc(at)),
            FILE_EXTENSION,
            &existing,
        ),
        _ => daily,
    }
}

/// The default file name for a file started at `at`.
pub fn file_name_at(at: SystemTime) -> String {
    format!("{FILE_PREFIX}{}.{FILE_EXTENSION}", compact_utc(at))
}

/// The name a rotated `path` is renamed to: `<stem>-<UTC>.<ext>`, sorting after the
/// rotated files already there.
pub fn rotated_name(path: &Path, at: SystemTime) -> PathBuf {
    let dir = path.parent().unwrap_or(Path::new("."));
    let (stem, ext) = stem_and_extension(path);
    let existing = files_of(&FileLocation::Path(path.to_owned())).unwrap_or_default();
    next_name(dir, &format!("{stem}-{}", compact_utc(at)), &ext, &existing)
}

fn stem_and_extension(path: &Path) -> (String, String) {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ext = path
        .extension()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    (stem, ext)
}

/// `<base>.<ext>`, or `<base>-<n>.<ext>` with `n` past every suffix already used with
/// `base`, so that names keep sorting in the order files were started even after older
/// ones were deleted.
fn next_name(dir: &Path, base: &str, ext: &str, existing: &[PathBuf]) -> PathBuf {
    let name = |suffix: String| {
        if ext.is_empty() {
            format!("{base}{suffix}")
        } else {
            format!("{base}{suffix}.{ext}")
        }
    };
    let used = existing
        .iter()
        .filter_map(|file| {
            let (key, n) = start_key(file);
            (key == base).then_some(n)
        })
        .max();
    let mut n = used.map_or(0, |n| n + 1);
    loop {
        let candidate = dir.join(if n == 0 {
            name(String::new())
        } else {
            name(format!("-{n}"))
        });
        if !candidate.exists() {
            return candidate;
        }
        n += 1;
    }
}

/// The files of a set, oldest first by name: in a folder, every `querygate_audit_*.log`;
/// for a path, its rotated siblings and then the path itself.
pub fn files_of(location: &FileLocation) -> std::io::Result<Vec<PathBuf>> {
    match location {
        FileLocation::Dir(dir) => {
            let mut files = list(dir, |name| {
                name.starts_with(FILE_PREFIX) && name.ends_with(&format!(".{FILE_EXTENSION}"))
            })?;
            sort_by_start(&mut files);
            Ok(files)
        }
        FileLocation::Path(path) => {
            let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
            let dir = dir.unwrap_or(Path::new("."));
            let (stem, ext) = stem_and_extension(path);
            let prefix = format!("{stem}-");
            let suffix = if ext.is_empty() {
                String::new()
            } else {
                format!(".{ext}")
            };
            let mut files = match list(dir, |name| {
                name.starts_with(&prefix)
                    && name.ends_with(&suffix)
                    && name[prefix.len()..name.len() - suffix.len()]
                        .chars()
                        .next()
                        .is_some_and(|c| c.is_ascii_digit())
            }) {
                Ok(files) => files,
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => Vec::new(),
                Err(err) => return Err(err),
            };
            sort_by_start(&mut files);
            if path.exists() {
                files.push(path.clone());
            }
            Ok(files)
        }
    }
}

/// Sorts files by when they were started: by name, a `-N` suffix (several files started in
/// the same second) after the name without it.
fn sort_by_start(files: &mut [PathBuf]) {
    files.sort_by_cached_key(|file| start_key(file));
}

/// A file's name without extension and `-N` suffix, and `N` (0 without one).
fn start_key(file: &Path) -> (String, u64) {
    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    match stem.rsplit_once('-') {
        Some((base, n))
            if !n.is_empty() && n.len() < 10 && n.bytes().all(|b| b.is_ascii_digit()) =>
        {
            (base.to_owned(), n.parse::<u64>().unwrap_or(0))
        }
        _ => (stem, 0),
    }
}

fn list(dir: &Path, keep: impl Fn(&str) -> bool) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if keep(&name) && entry.file_type()?.is_file() {
            out.push(entry.path());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn names_follow_the_documented_pattern() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_038_201);
        assert_eq!(file_name_at(at), "querygate_audit_20261130T113001Z.log");
        let dir = tempfile::tempdir().unwrap();
        let first = dir.path().join(file_name_at(at));
        std::fs::write(&first, "x").unwrap();
        let second = file_for(dir.path(), at, 1);
        assert_eq!(
            second.file_name().unwrap(),
            "querygate_audit_20261130T113001Z-1.log"
        );
        std::fs::write(&second, "").unwrap();
        std::fs::write(dir.path().join("other.log"), "").unwrap();
        let files = files_of(&FileLocation::Dir(dir.path().to_owned())).unwrap();
        assert_eq!(files, vec![first, second]);
    }

    #[test]
    fn a_folder_has_one_file_per_day_until_it_is_full() {
        let dir = tempfile::tempdir().unwrap();
        let day = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_038_201);
        let first = file_for(dir.path(), day, 10);
        assert_eq!(first.file_name().unwrap(), "querygate_audit_20261130.log");
        std::fs::write(&first, "abc").unwrap();
        assert_eq!(
            file_for(dir.path(), day + Duration::from_secs(60), 10),
            first
        );
        std::fs::write(&first, "0123456789").unwrap();
        let second = file_for(dir.path(), day, 10);
        assert_eq!(
            second.file_name().unwrap(),
            "querygate_audit_20261130-1.log"
        );
        std::fs::write(&second, "").unwrap();
        let next_day = file_for(dir.path(), day + Duration::from_secs(86_400), 10);
        assert_eq!(
            next_day.file_name().unwrap(),
            "querygate_audit_20261201.log"
        );
        // A per-start file of that day (the older naming) sorts after the daily name: a
        // rotation then keeps the per-start naming, so the order stays the writing order.
        std::fs::write(
            dir.path().join("querygate_audit_20261201T080000Z.log"),
            "0123456789",
        )
        .unwrap();
        let later = file_for(dir.path(), day + Duration::from_secs(86_400 + 3_600), 10);
        assert_eq!(
            later.file_name().unwrap(),
            "querygate_audit_20261201T123001Z.log"
        );
    }

    #[test]
    fn a_path_set_is_its_rotations_then_itself() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_038_201);
        std::fs::write(&path, "").unwrap();
        let rotated = rotated_name(&path, at);
        assert_eq!(rotated.file_name().unwrap(), "audit-20261130T113001Z.log");
        std::fs::write(&rotated, "").unwrap();
        std::fs::write(dir.path().join("audit-notes.log"), "").unwrap();
        let files = files_of(&FileLocation::Path(path.clone())).unwrap();
        assert_eq!(files, vec![rotated, path]);
        assert_eq!(
            default_dir(&HashMap::from([("HOME".to_owned(), "/home/u".to_owned())])),
            PathBuf::from("/home/u/.local/state/querygate/audit")
        );
    }
}
