//! Where the rows sit in a response body: [`RowLocator`], parsed from a StackQL `objectKey`.

/// One step of a row locator (parsed from a StackQL `objectKey`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// Descend into the object property with this exact name.
    Key(String),
    /// `[*]`: iterate the elements of an array or the values of an object.
    Each,
}

/// Where the rows sit in a response body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RowLocator {
    /// Follow these steps from the document root. The value(s) reached are the rows:
    /// an array reached → each element is a row; an object reached → one row
    /// (an empty object `{}` → zero rows); null/missing/scalar → zero rows.
    /// `Each` (`[*]`) iterates array elements OR object values (Google aggregated lists:
    /// `items` is a map `{"zones/a": {"instances": [...]}, ...}`).
    ///
    /// A `Key` step applies to objects only: on an array or a scalar it finds nothing.
    /// A trailing `Each` yields the elements (or object values) themselves as rows, exactly
    /// like an array reached by a trailing key: `$.items[*]` and `$.items` load the same rows
    /// when `items` is an array.
    Path(Vec<Step>),
    /// No objectKey and no schema hint: a top-level array → its elements are rows; a top-level
    /// object with an `items` array → those are the rows; any other non-empty object → one
    /// row; `{}` → zero rows.
    Auto,
}

impl RowLocator {
    /// Parses an objectKey: JSONPath like `$.items[*].instances[*]`, `$.value`, `$[*]`,
    /// `$.policyResults`, `$['key.with.dots']` / `$["k"]`, and legacy keys without `$`
    /// (`subnetworks`, `items`, `a.b`) meaning `$.subnetworks` etc. `$` alone → root.
    /// `.*` is accepted as a synonym of `[*]`; surrounding whitespace is ignored.
    /// Errors (a String message naming the bad input) for anything else (filters `?(…)`,
    /// recursive descent `..`, slices, indexes, unions, unbalanced brackets, empty).
    pub(crate) fn parse(object_key: &str) -> Result<RowLocator, String> {
        let fail = |why: &str| format!("unsupported objectKey `{object_key}`: {why}");
        let input = object_key.trim();
        if input.is_empty() {
            return Err(fail("it is empty"));
        }
        let steps = match input.strip_prefix('$') {
            Some(rest) => parse_steps(rest),
            // Legacy keys: `items`, `a.b`, `items[*]` mean `$.items`, `$.a.b`, `$.items[*]`.
            None if input.starts_with(['.', '[']) => parse_steps(input),
            None => parse_steps(&format!(".{input}")),
        };
        steps.map(RowLocator::Path).map_err(|why| fail(&why))
    }
}

/// Parses the part of a JSONPath after `$` into steps.
fn parse_steps(path: &str) -> Result<Vec<Step>, String> {
    let mut steps = Vec::new();
    let mut rest = path;
    while let Some(c) = rest.chars().next() {
        match c {
            '.' => {
                rest = &rest[1..];
                if rest.starts_with('.') {
                    return Err("recursive descent `..` is not supported".to_owned());
                }
                let end = rest.find(['.', '[']).unwrap_or(rest.len());
                let segment = &rest[..end];
                rest = &rest[end..];
                if segment.is_empty() {
                    return Err("a `.` must be followed by a key".to_owned());
                }
                if segment == "*" {
                    steps.push(Step::Each);
                } else if let Some(bad) = segment
                    .chars()
                    .find(|c| matches!(c, ']' | '(' | ')' | '?' | '\'' | '"' | '*' | '@' | ':'))
                {
                    return Err(format!(
                        "unexpected `{bad}` in key `{segment}` (filters, scripts and slices \
                         are not supported; quote unusual keys as ['…'])"
                    ));
                } else if segment.chars().any(char::is_whitespace) {
                    return Err(format!(
                        "whitespace in key `{segment}` (quote such keys as ['…'])"
                    ));
                } else {
                    steps.push(Step::Key(segment.to_owned()));
                }
            }
            '[' => {
                let (step, after) = parse_bracket(&rest[1..])?;
                steps.push(step);
                rest = after;
            }
            ']' => return Err("unbalanced `]`".to_owned()),
            other => {
                return Err(format!("expected `.` or `[` but found `{other}`"));
            }
        }
    }
    Ok(steps)
}

/// Parses the inside of a bracket (the text after `[`); returns the step and the text after `]`.
fn parse_bracket(text: &str) -> Result<(Step, &str), String> {
    let inner = text.trim_start();
    if let Some(quote) = inner.chars().next().filter(|c| matches!(c, '\'' | '"')) {
        let mut key = String::new();
        let mut chars = inner.char_indices().skip(1);
        let mut closed_at = None;
        while let Some((i, c)) = chars.next() {
            if c == '\\' {
                match chars.next() {
                    Some((_, escaped)) => key.push(escaped),
                    None => break,
                }
            } else if c == quote {
                closed_at = Some(i + c.len_utf8());
                break;
            } else {
                key.push(c);
            }
        }
        let Some(after_quote) = closed_at else {
            return Err(format!("unterminated quoted key starting `{inner}`"));
        };
        let after = inner[after_quote..].trim_start();
        if let Some(after) = after.strip_prefix(']') {
            return Ok((Step::Key(key), after));
        }
        if after.starts_with(',') {
            return Err("unions `[…, …]` are not supported".to_owned());
        }
        return Err(format!("unbalanced `[` after quoted key `{key}`"));
    }
    let Some(close) = inner.find(']') else {
        return Err("unbalanced `[`".to_owned());
    };
    let content = inner[..close].trim();
    let after = &inner[close + 1..];
    if content == "*" {
        Ok((Step::Each, after))
    } else if content.starts_with('?') {
        Err(format!("filter `[{content}]` is not supported"))
    } else if content.starts_with('(') {
        Err(format!("script expression `[{content}]` is not supported"))
    } else if content.contains(':') {
        Err(format!("slice `[{content}]` is not supported"))
    } else if content.contains(',') {
        Err(format!("union `[{content}]` is not supported"))
    } else if content.is_empty() {
        Err("empty brackets `[]`".to_owned())
    } else if content.parse::<i64>().is_ok() {
        Err(format!("array index `[{content}]` is not supported"))
    } else if content.contains('[') {
        Err("unbalanced `[`".to_owned())
    } else {
        Err(format!("unquoted key `[{content}]` (write ['{content}'])"))
    }
}
