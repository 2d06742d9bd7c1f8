//! Dotenv files as StackQL reads them: `KEY=VALUE` lines, `#` comments and blank lines
//! skipped, an optional leading `export `, one pair of matching surrounding quotes removed
//! (no escapes, no inline comments), CRLF tolerated, empty values dropped, later duplicates
//! win.

use std::io::{Read as _, Write as _};
use std::path::Path;

/// The largest env file read (a credential file is a few KiB at most).
pub(crate) const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// Reads an env file: only a regular file (a FIFO or device would block start-up or never
/// end), of at most [`MAX_FILE_BYTES`], as UTF-8.
pub(crate) fn read(path: &Path) -> std::io::Result<String> {
    use std::io::{Error, ErrorKind};
    let regular = |meta: &std::fs::Metadata| {
        if meta.is_file() {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::InvalidInput,
                "not a regular file (a FIFO, device or folder is refused)",
            ))
        }
    };
    // Checked before opening (opening a FIFO blocks until a writer comes) and after.
    regular(&std::fs::metadata(path)?)?;
    let file = std::fs::File::open(path)?;
    regular(&file.metadata()?)?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!("larger than {MAX_FILE_BYTES} bytes"),
        ));
    }
    String::from_utf8(bytes).map_err(|_| Error::new(ErrorKind::InvalidData, "not UTF-8 text"))
}

/// The text a created credential file starts with.
const NEW_FILE_HEADER: &str = "\
# querygate credential store: sourced at start-up and on each reload_credentials call.
# One KEY=VALUE per line, e.g.:
# STACKQL_GITHUB_USERNAME=...
# STACKQL_GITHUB_PASSWORD=...
# DD_API_KEY=...
";

/// Parses dotenv text into ordered pairs (later duplicates win when collected).
pub(crate) fn parse(text: &str) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    for line in text.split('\n') {
        let line = line.trim_end_matches('\r').trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        if key.is_empty() {
            continue;
        }
        let value = unquote(value.trim());
        if value.is_empty() {
            continue;
        }
        pairs.push((key.to_owned(), value.to_owned()));
    }
    pairs
}

fn unquote(value: &str) -> &str {
    for quote in ['"', '\''] {
        if value.len() >= 2 && value.starts_with(quote) && value.ends_with(quote) {
            return &value[1..value.len() - 1];
        }
    }
    value
}

/// Creates `path` (and missing parent folders, mode 0700) as an empty commented file with
/// mode 0600, unless it exists. An existing file is never touched. Returns whether it
/// created the file.
pub(crate) fn ensure_exists(path: &Path) -> std::io::Result<bool> {
    if path.exists() {
        return Ok(false);
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::DirBuilderExt as _;
            builder.mode(0o700);
        }
        builder.create(parent)?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    match options.open(path) {
        Ok(mut file) => {
            file.write_all(NEW_FILE_HEADER.as_bytes())?;
            Ok(true)
        }
        // Another process created it first: that file is the store.
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_as_stackql_does() {
        let text = "# comment\r\n\r\nexport A=1\r\nB = \"two words\" \nC='x'\nD=\nE=\"\"\nnoequals\n=v\nF=a=b\nA=3\nG=\"unbalanced\nH=v # not a comment\n";
        let pairs = parse(text);
        let get = |k: &str| {
            pairs
                .iter()
                .rev()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("A"), Some("3"));
        assert_eq!(get("B"), Some("two words"));
        assert_eq!(get("C"), Some("x"));
        assert_eq!(get("D"), None);
        assert_eq!(get("E"), None);
        assert_eq!(get("F"), Some("a=b"));
        assert_eq!(get("G"), Some("\"unbalanced"));
        assert_eq!(get("H"), Some("v # not a comment"));
        assert!(pairs.iter().all(|(k, _)| !k.is_empty() && k != "noequals"));
    }

    #[test]
    fn creates_a_private_commented_file_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/creds.env");
        assert!(ensure_exists(&path).unwrap());
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("# querygate credential store"));
        assert!(parse(&text).is_empty());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::write(&path, "K=v\n").unwrap();
        assert!(!ensure_exists(&path).unwrap());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "K=v\n");
    }

    #[test]
    fn only_small_regular_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo.env");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        // Returns at once instead of waiting for a writer.
        let err = read(&fifo).unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
        assert!(read(dir.path()).is_err());
        let big = dir.path().join("big.env");
        std::fs::write(&big, vec![b'#'; MAX_FILE_BYTES as usize + 1]).unwrap();
        let err = read(&big).unwrap_err().to_string();
        assert!(err.contains("larger than 1048576 bytes"), "{err}");
        let link = dir.path().join("link.env");
        std::fs::write(dir.path().join("real.env"), "K=v\n").unwrap();
        std::os::unix::fs::symlink(dir.path().join("real.env"), &link).unwrap();
        assert_eq!(read(&link).unwrap(), "K=v\n");
    }
}
