//! Walking a body to its rows: the [`Scanner`] follows a [`RowLocator`] and hands every row
//! found to a [`RowSink`]; everything off the rows' path is skipped, or kept raw when
//! [`Captures`] asks for it.

use std::borrow::Cow;

use super::RowsError;
use super::capture::Captures;
use super::locator::{RowLocator, Step};
use super::scan::{Key, Scanner, SyntaxError};

/// Why a walk stopped.
#[derive(Debug)]
pub(super) enum Halt {
    /// The body is not JSON there.
    Syntax(SyntaxError),
    /// The sink failed.
    Sink(RowsError),
}

impl From<SyntaxError> for Halt {
    fn from(error: SyntaxError) -> Self {
        Halt::Syntax(error)
    }
}

/// The result of a walk step.
pub(super) type Walk<T = ()> = Result<T, Halt>;

/// Receives the rows found by the walk.
pub(super) trait RowSink<'de> {
    /// One row that is a JSON object, next in `scan` (its `{` seen by [`Scanner::peek`]): the
    /// sink reads it through its closing `}`. `allow_empty`: whether `{}` still counts as a
    /// row (it does as an array element, not as the single object a path reached).
    fn object_row(&mut self, scan: &mut Scanner<'de>, allow_empty: bool) -> Walk;

    /// Whether non-object rows are of interest (otherwise they are skipped unread).
    fn wants_scalar_rows(&self) -> bool;

    /// One row that is not a JSON object, as its JSON text (an array's with its elements
    /// separated by bare commas).
    fn scalar_row(&mut self, raw: Cow<'de, str>) -> Walk;

    /// The single row of a top-level object under [`RowLocator::Auto`] (never empty):
    /// (key, raw JSON value) pairs.
    fn pairs_row(&mut self, pairs: &[Pair<'de>]) -> Walk;
}

/// A property of an object: its key's text and its value's raw JSON.
pub(super) type Pair<'de> = (Cow<'de, str>, &'de str);

/// Parses the whole body, feeding the rows at `locator` into `sink` and keeping the
/// properties `captures` asks for.
pub(super) fn walk<'de, S: RowSink<'de>>(
    body: &'de [u8],
    locator: &RowLocator,
    sink: &mut S,
    captures: &mut Captures<'de>,
) -> Walk {
    let mut scan = Scanner::new(body);
    match locator {
        RowLocator::Path(steps) => {
            follow(&mut scan, steps, 0, sink, captures)?;
            scan.end()?;
            Ok(())
        }
        RowLocator::Auto => {
            let pairs = auto(&mut scan, sink, captures)?;
            scan.end()?;
            match pairs {
                Some(pairs) if !pairs.is_empty() => sink.pairs_row(&pairs),
                _ => Ok(()),
            }
        }
    }
}

/// Decodes an object key, as a [`Halt`] on a bad escape.
pub(super) fn key_text<'de>(key: Key<'de>) -> Walk<Cow<'de, str>> {
    key.text().map_err(|e| Halt::Sink(RowsError::Json(e)))
}

/// Follows the remaining `steps` from the next value, at `depth` steps from the root.
fn follow<'de, S: RowSink<'de>>(
    scan: &mut Scanner<'de>,
    steps: &[Step],
    depth: usize,
    sink: &mut S,
    captures: &mut Captures<'de>,
) -> Walk {
    match steps.split_first() {
        // The value the path reached: an array's elements are rows, an object is one row.
        None => match scan.peek()? {
            b'[' => rows_of_array(scan, sink),
            b'{' => sink.object_row(scan, false),
            _ => Ok(scan.skip_value()?),
        },
        // A trailing `[*]`: each array element or object value is a row.
        Some((Step::Each, [])) => match scan.peek()? {
            b'[' | b'{' => scan.each_value(|scan| row(scan, sink)),
            _ => Ok(scan.skip_value()?),
        },
        // A `[*]` with more steps after it.
        Some((Step::Each, rest)) => match scan.peek()? {
            b'[' | b'{' => scan.each_value(|scan| follow(scan, rest, depth + 1, sink, captures)),
            _ => Ok(scan.skip_value()?),
        },
        // A `.key` step: descend into that property of an object; anything else holds no
        // rows (other properties are skipped, or kept when captured).
        Some((Step::Key(step), rest)) => {
            if scan.peek()? != b'{' {
                return Ok(scan.skip_value()?);
            }
            let mut more = scan.open_object()?;
            while more {
                let name = key_text(scan.key()?)?;
                if name == step.as_str() {
                    follow(scan, rest, depth + 1, sink, captures)?;
                } else if let Some(slot) = captures.slot(depth, &name) {
                    let raw = scan.raw_value()?;
                    captures.keep(slot, raw);
                } else {
                    scan.skip_value()?;
                }
                more = scan.next_property()?;
            }
            Ok(())
        }
    }
}

/// Every element of the array that is next is a row.
fn rows_of_array<'de, S: RowSink<'de>>(scan: &mut Scanner<'de>, sink: &mut S) -> Walk {
    scan.each_value(|scan| row(scan, sink))
}

/// One row: an object, or any other value (a "scalar row", skipped unless the sink wants
/// those).
fn row<'de, S: RowSink<'de>>(scan: &mut Scanner<'de>, sink: &mut S) -> Walk {
    match scan.peek()? {
        b'{' => sink.object_row(scan, true),
        _ if !sink.wants_scalar_rows() => Ok(scan.skip_value()?),
        b'[' => {
            // The elements are kept as written; only the separators between them are
            // normalised.
            let mut text = String::from("[");
            let mut more = scan.open_array()?;
            while more {
                if text.len() > 1 {
                    text.push(',');
                }
                text.push_str(scan.raw_value()?);
                more = scan.next_element()?;
            }
            text.push(']');
            sink.scalar_row(Cow::Owned(text))
        }
        _ => {
            let raw = scan.raw_value()?;
            sink.scalar_row(Cow::Borrowed(raw))
        }
    }
}

/// [`RowLocator::Auto`] at the document root: a top-level array's elements are rows; a
/// top-level object's `items` array holds the rows (streamed as soon as it is reached);
/// any other object is returned as its (key, raw value) pairs, to form one row.
fn auto<'de, S: RowSink<'de>>(
    scan: &mut Scanner<'de>,
    sink: &mut S,
    captures: &mut Captures<'de>,
) -> Walk<Option<Vec<Pair<'de>>>> {
    match scan.peek()? {
        b'[' => {
            rows_of_array(scan, sink)?;
            return Ok(None);
        }
        b'{' => {}
        _ => {
            scan.skip_value()?;
            return Ok(None);
        }
    }
    let mut pairs = Vec::new();
    let mut more = scan.open_object()?;
    while more {
        let name = key_text(scan.key()?)?;
        if name == "items" && scan.peek()? == b'[' {
            rows_of_array(scan, sink)?;
            skip_rest_of_root(scan, captures)?;
            return Ok(None);
        }
        let raw = scan.raw_value()?;
        captures.keep_root(&name, raw);
        pairs.push((name, raw));
        more = scan.next_property()?;
    }
    Ok(Some(pairs))
}

/// The root properties after a streamed `items` array: skipped, or kept when captured.
fn skip_rest_of_root<'de>(scan: &mut Scanner<'de>, captures: &mut Captures<'de>) -> Walk {
    while scan.next_property()? {
        let name = key_text(scan.key()?)?;
        match captures.slot(0, &name) {
            Some(slot) => {
                let raw = scan.raw_value()?;
                captures.keep(slot, raw);
            }
            None => scan.skip_value()?,
        }
    }
    Ok(())
}
