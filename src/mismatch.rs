//! serde's type errors about numbers, said as what the value must be.
//!
//! serde names the Rust type it wanted: a negative `row_limit` is "invalid value: integer
//! `-1`, expected u64", a word for a count "invalid type: string \"many\", expected usize".
//! [`Mismatch::of`] reads such a message and says it as a person would: "must be a whole
//! number ≥ 0, got -1". The tool arguments and the configuration (its file and its
//! `QUERYGATE_*__*` overrides) put their serde errors through it; messages about anything
//! else (unknown fields, strings, enums) are left as serde wrote them.

use std::fmt;

/// A value of the wrong type or out of its type's range, where a number was wanted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mismatch {
    /// What the value must be: "a whole number ≥ 0", "a number", …
    pub(crate) must_be: &'static str,
    /// The value given, as it was written: `-1`, `1.5`, `"many"`, `null`, "a list", …
    pub(crate) got: String,
}

impl Mismatch {
    /// The mismatch a serde error message reports, when it is one of a value given where a
    /// number was wanted (`invalid type: …, expected u64` or `invalid value: …, expected
    /// u8`); `None` for every other message.
    pub(crate) fn of(message: &str) -> Option<Mismatch> {
        let rest = message
            .strip_prefix("invalid value: ")
            .or_else(|| message.strip_prefix("invalid type: "))?;
        let (unexpected, expected) = rest.rsplit_once(", expected ")?;
        Some(Mismatch {
            must_be: must_be(expected)?,
            got: got(unexpected),
        })
    }
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "must be {}, got {}", self.must_be, self.got)
    }
}

/// What a value must be, for the name serde gives a number type it expected.
fn must_be(expected: &str) -> Option<&'static str> {
    Some(match expected {
        "u8" => "a whole number from 0 to 255",
        "u16" => "a whole number from 0 to 65535",
        "u32" => "a whole number from 0 to 4294967295",
        "u64" | "u128" | "usize" => "a whole number ≥ 0",
        "i8" => "a whole number from -128 to 127",
        "i16" => "a whole number from -32768 to 32767",
        "i32" => "a whole number from -2147483648 to 2147483647",
        "i64" | "i128" | "isize" => "a whole number",
        "a nonzero u8" => "a whole number from 1 to 255",
        "a nonzero u16" => "a whole number from 1 to 65535",
        "a nonzero u32" => "a whole number from 1 to 4294967295",
        "a nonzero u64" | "a nonzero u128" | "a nonzero usize" => "a whole number ≥ 1",
        "f32" | "f64" => "a number",
        _ => return None,
    })
}

/// The value serde describes (`integer `-1``, `floating point `1.5``, `string "x"`,
/// `sequence`), as it was written.
fn got(unexpected: &str) -> String {
    for kind in ["integer ", "floating point ", "boolean ", "character "] {
        if let Some(value) = unexpected
            .strip_prefix(kind)
            .and_then(|v| v.strip_prefix('`'))
            .and_then(|v| v.strip_suffix('`'))
        {
            return value.to_owned();
        }
    }
    if let Some(text) = unexpected.strip_prefix("string ") {
        return text.to_owned();
    }
    match unexpected {
        "sequence" => "a list".to_owned(),
        "map" => "a map".to_owned(),
        "unit value" | "null" => "null".to_owned(),
        other => other.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The message serde writes when `T` is deserialized from `value`.
    fn serde_says<T: serde::de::DeserializeOwned + fmt::Debug>(value: serde_json::Value) -> String {
        serde_json::from_value::<T>(value).unwrap_err().to_string()
    }

    #[test]
    fn number_errors_say_what_the_value_must_be_and_what_it_was() {
        use serde_json::json;
        for (message, said) in [
            (
                serde_says::<u64>(json!(-1)),
                "must be a whole number ≥ 0, got -1",
            ),
            (
                serde_says::<usize>(json!(-3)),
                "must be a whole number ≥ 0, got -3",
            ),
            (
                serde_says::<u64>(json!(1.5)),
                "must be a whole number ≥ 0, got 1.5",
            ),
            (
                serde_says::<usize>(json!("many")),
                "must be a whole number ≥ 0, got \"many\"",
            ),
            (
                serde_says::<u64>(json!(null)),
                "must be a whole number ≥ 0, got null",
            ),
            (
                serde_says::<u64>(json!([1])),
                "must be a whole number ≥ 0, got a list",
            ),
            (
                serde_says::<u64>(json!({"a": 1})),
                "must be a whole number ≥ 0, got a map",
            ),
            (
                serde_says::<u64>(json!(true)),
                "must be a whole number ≥ 0, got true",
            ),
            (
                serde_says::<u32>(json!(4_294_967_296_u64)),
                "must be a whole number from 0 to 4294967295, got 4294967296",
            ),
            (
                serde_says::<u8>(json!(300)),
                "must be a whole number from 0 to 255, got 300",
            ),
            (
                serde_says::<i64>(json!(0.5)),
                "must be a whole number, got 0.5",
            ),
            (
                serde_says::<std::num::NonZeroUsize>(json!(0)),
                "must be a whole number ≥ 1, got 0",
            ),
            (serde_says::<f64>(json!("x")), "must be a number, got \"x\""),
        ] {
            let mismatch = Mismatch::of(&message).unwrap_or_else(|| panic!("{message}"));
            assert_eq!(mismatch.to_string(), said, "{message}");
        }
    }

    #[test]
    fn other_errors_are_not_mismatches() {
        use serde_json::json;
        for message in [
            serde_says::<String>(json!(5)),
            serde_says::<bool>(json!("yes")),
            "unknown field `x`, expected one of `a`, `b`".to_owned(),
            "missing field `sql`".to_owned(),
        ] {
            assert_eq!(Mismatch::of(&message), None, "{message}");
        }
    }
}
