//! File paths in the configuration: `~` and `~/…` are the home folder (`HOME`), and relative
//! paths are relative to the folder of the configuration file (without a file: the working
//! directory), so a desktop set-up works whatever folder the client starts querygate in.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Resolves configured paths.
#[derive(Debug, Clone)]
pub(super) struct PathResolver {
    home: Option<PathBuf>,
    base: Option<PathBuf>,
}

impl PathResolver {
    /// Paths relative to `config_file`'s folder, `~` from `HOME` in `env`.
    pub(super) fn new(env: &HashMap<String, String>, config_file: Option<&Path>) -> Self {
        let home = home(env);
        let base = config_file.and_then(|file| {
            let file = expand_home(file, home.as_deref()).ok()?;
            let folder = std::path::absolute(file).ok()?.parent()?.to_owned();
            Some(folder)
        });
        PathResolver { home, base }
    }

    /// `path` with `~` expanded, made absolute against the configuration file's folder.
    pub(super) fn resolve(&self, path: &Path) -> Result<PathBuf, String> {
        let expanded = expand_home(path, self.home.as_deref())?;
        Ok(match &self.base {
            Some(base) if expanded.is_relative() => base.join(expanded),
            _ => expanded,
        })
    }
}

impl PathResolver {
    /// [`PathResolver::resolve`], reporting a problem under `key` (and keeping the path as
    /// written) when it cannot be resolved.
    pub(super) fn resolve_or_report(
        &self,
        path: &Path,
        key: &str,
        problems: &mut super::Problems,
    ) -> PathBuf {
        self.resolve(path).unwrap_or_else(|message| {
            problems.push(key, message);
            path.to_owned()
        })
    }
}

fn home(env: &HashMap<String, String>) -> Option<PathBuf> {
    env.get("HOME").filter(|h| !h.is_empty()).map(PathBuf::from)
}

/// `~` and `~/rest` with the home folder; `~user` is refused (not supported).
pub(super) fn expand_home(path: &Path, home: Option<&Path>) -> Result<PathBuf, String> {
    let mut components = path.components();
    let Some(std::path::Component::Normal(first)) = components.next() else {
        return Ok(path.to_owned());
    };
    let Some(first) = first.to_str() else {
        return Ok(path.to_owned());
    };
    if first == "~" {
        let home =
            home.ok_or_else(|| format!("'{}' starts with ~ but HOME is not set", path.display()))?;
        return Ok(home.join(components.as_path()));
    }
    if first.starts_with('~') {
        return Err(format!(
            "'{}': ~user is not supported; write the full path",
            path.display()
        ));
    }
    Ok(path.to_owned())
}

/// Expands `~` in the configuration file's own path (`--config`, `QUERYGATE_CONFIG`).
pub(super) fn config_file(path: &Path, env: &HashMap<String, String>) -> PathBuf {
    expand_home(path, home(env).as_deref()).unwrap_or_else(|_| path.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn home_and_relative_paths() {
        let env = HashMap::from([("HOME".to_owned(), "/home/u".to_owned())]);
        let r = PathResolver::new(&env, Some(Path::new("/etc/qg/config.yaml")));
        let ok = |p: &str| r.resolve(Path::new(p)).unwrap();
        assert_eq!(ok("~"), PathBuf::from("/home/u"));
        assert_eq!(ok("~/a/b.env"), PathBuf::from("/home/u/a/b.env"));
        assert_eq!(ok("creds.env"), PathBuf::from("/etc/qg/creds.env"));
        assert_eq!(ok("../reg"), PathBuf::from("/etc/qg/../reg"));
        assert_eq!(ok("/abs/x"), PathBuf::from("/abs/x"));
        assert_eq!(ok("a~/x"), PathBuf::from("/etc/qg/a~/x"));
        assert!(
            r.resolve(Path::new("~bob/x"))
                .unwrap_err()
                .contains("~user")
        );
        let home_config = PathResolver::new(&env, Some(Path::new("~/.config/qg.yaml")));
        assert_eq!(
            home_config.resolve(Path::new("r")).unwrap(),
            PathBuf::from("/home/u/.config/r")
        );
        let no_home = PathResolver::new(&HashMap::new(), None);
        assert!(
            no_home
                .resolve(Path::new("~/x"))
                .unwrap_err()
                .contains("HOME")
        );
        assert_eq!(no_home.resolve(Path::new("x")).unwrap(), PathBuf::from("x"));
    }
}
