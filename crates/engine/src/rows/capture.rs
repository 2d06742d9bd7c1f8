//! Scalars read during the row walk (pagination tokens): the values at given paths from the
//! root, found in the same pass that decodes the rows.
//!
//! A wanted path that leaves the rows' path at an object property (`$.nextPageToken` beside
//! rows at `$.items`, `$.result_info.page` beside `$.result`) is captured there as a raw
//! slice while the walk skips past it, and the rest of the path is then read from that
//! slice. A path that does not leave the rows' path that way (it runs through a `[*]`, into
//! the rows, or the rows are the root) is read by a separate skim of the body.

use std::borrow::Cow;

use super::locator::{RowLocator, Step};
use super::scalars::scalar_text;

/// Where each wanted path's value comes from.
enum Source {
    /// The rest of the path, read from the raw value captured in `slot`.
    Captured { slot: usize, rest: Vec<String> },
    /// A separate skim of the body.
    Skim,
}

/// The properties to capture during one walk, and what was captured.
pub(super) struct Captures<'de> {
    /// (depth, key) of each captured property; depth 0 is the root object.
    keys: Vec<(usize, String)>,
    raw: Vec<Option<&'de str>>,
    sources: Vec<Source>,
}

impl<'de> Captures<'de> {
    /// Plans the capture of `paths` for a walk following `locator`.
    pub(super) fn plan(paths: &[Vec<String>], locator: &RowLocator) -> Self {
        let mut keys: Vec<(usize, String)> = Vec::new();
        let sources = paths
            .iter()
            .map(|path| match leaves_at(path, locator) {
                Some(depth) => {
                    let key = (depth, path[depth].clone());
                    let slot = match keys.iter().position(|k| *k == key) {
                        Some(slot) => slot,
                        None => {
                            keys.push(key);
                            keys.len() - 1
                        }
                    };
                    Source::Captured {
                        slot,
                        rest: path[depth + 1..].to_vec(),
                    }
                }
                None => Source::Skim,
            })
            .collect();
        let raw = vec![None; keys.len()];
        Captures { keys, raw, sources }
    }

    /// The slot of the property `key` of the object at `depth`, when it is captured.
    pub(super) fn slot(&self, depth: usize, key: &str) -> Option<usize> {
        self.keys.iter().position(|(d, k)| *d == depth && k == key)
    }

    /// Keeps `value` as the captured value of `slot` (a later duplicate key wins).
    pub(super) fn keep(&mut self, slot: usize, value: &'de str) {
        if let Some(entry) = self.raw.get_mut(slot) {
            *entry = Some(value);
        }
    }

    /// Keeps `value` when the root property `key` is captured.
    pub(super) fn keep_root(&mut self, key: &str, value: &'de str) {
        if let Some(slot) = self.slot(0, key) {
            self.keep(slot, value);
        }
    }

    /// The scalar found for each wanted path, in order: captured ones from their slices,
    /// the others by one skim of `body` (none when `body`, which the walk has parsed, is an
    /// array).
    pub(super) fn finish(
        self,
        body: &[u8],
        paths: &[Vec<String>],
    ) -> serde_json::Result<Vec<Option<String>>> {
        let skim: Vec<Vec<String>> = paths
            .iter()
            .zip(&self.sources)
            .filter(|(_, source)| matches!(source, Source::Skim))
            .map(|(path, _)| path.clone())
            .collect();
        let mut skimmed = if skim.is_empty() || root_is_array(body) {
            // The walk has parsed the body: a root array has no properties, and is no
            // scalar itself, so every path finds nothing (what a skim would say).
            Vec::new()
        } else {
            super::extract_scalars(body, &skim)?
        }
        .into_iter();
        let mut out = Vec::with_capacity(paths.len());
        for source in &self.sources {
            let found = match source {
                Source::Skim => skimmed.next().flatten(),
                Source::Captured { slot, rest } => match self.raw.get(*slot).copied().flatten() {
                    None => None,
                    Some(raw) if rest.is_empty() => scalar_text(raw)?.map(Cow::into_owned),
                    Some(raw) => {
                        super::extract_scalars(raw.as_bytes(), std::slice::from_ref(rest))?
                            .into_iter()
                            .next()
                            .flatten()
                    }
                },
            };
            out.push(found);
        }
        Ok(out)
    }
}

/// Whether the JSON text `body` is an array.
fn root_is_array(body: &[u8]) -> bool {
    body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[')
}

/// The depth at which `path` leaves the rows' path at an object property: every step before
/// it is the same key, and the step there is a different key. None when the path runs
/// through a `[*]`, ends on the rows' path, or the rows' path ends first.
fn leaves_at(path: &[String], locator: &RowLocator) -> Option<usize> {
    match locator {
        // Rows sit in the root array, or in the root's `items`, or are the root object.
        RowLocator::Auto => path.first().is_some_and(|key| key != "items").then_some(0),
        RowLocator::Path(steps) => {
            for (depth, step) in steps.iter().enumerate() {
                let key = path.get(depth)?;
                match step {
                    Step::Each => return None,
                    Step::Key(k) if k != key => return Some(depth),
                    Step::Key(_) => {}
                }
            }
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(keys: &[&str]) -> Vec<String> {
        keys.iter().map(|k| (*k).to_owned()).collect()
    }

    #[test]
    fn tokens_beside_the_rows_are_read_in_the_walk() {
        let parse = |key: &str| RowLocator::parse(key).unwrap_or(RowLocator::Auto);
        let token = path(&["nextPageToken"]);
        let nested = path(&["response_metadata", "next_cursor"]);
        for locator in [
            RowLocator::Auto,
            parse("$.items"),
            parse("$.value[*]"),
            parse("$.items[*].instances[*]"),
        ] {
            assert_eq!(leaves_at(&token, &locator), Some(0), "{locator:?}");
            assert_eq!(leaves_at(&nested, &locator), Some(0), "{locator:?}");
        }
        assert_eq!(
            leaves_at(&path(&["data", "next"]), &parse("$.data.items")),
            Some(1)
        );
        // Into the rows, through a `[*]`, or rows at the root: a separate skim.
        assert_eq!(leaves_at(&path(&["items"]), &RowLocator::Auto), None);
        assert_eq!(leaves_at(&path(&["data"]), &parse("$.data.items")), None);
        assert_eq!(leaves_at(&path(&["a", "b"]), &parse("$[*].b")), None);
        assert_eq!(leaves_at(&token, &parse("$")), None);
        assert_eq!(leaves_at(&[], &RowLocator::Auto), None);
    }
}
