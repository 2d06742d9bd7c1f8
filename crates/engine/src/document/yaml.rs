//! YAML text to a JSON value tree. An integer beyond 64 bits (a schema's
//! `maximum: 18446744073709552000` in DigitalOcean's and Linode's documents) becomes a
//! float, as it does when StackQL reads the document (Go's OpenAPI model keeps `minimum`,
//! `maximum` and numbers it does not type as `float64`); `serde_json::Value` alone has no
//! room for it and would refuse the whole document.

use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Parses YAML text into a JSON value tree.
pub(super) fn parse(text: &str) -> Result<Value, serde_norway::Error> {
    serde_norway::from_str::<YamlValue>(text).map(|v| v.0)
}

/// A JSON value read from YAML, with wide integers as floats.
struct YamlValue(Value);

impl<'de> Deserialize<'de> for YamlValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ValueVisitor).map(YamlValue)
    }
}

struct ValueVisitor;

/// A float for a number without room in 64 bits; `null` for none that is finite.
fn wide(value: f64) -> Value {
    Number::from_f64(value).map_or(Value::Null, Value::Number)
}

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_i128<E>(self, v: i128) -> Result<Value, E> {
        Ok(i64::try_from(v).map_or_else(|_| wide(v as f64), Value::from))
    }

    fn visit_u128<E>(self, v: u128) -> Result<Value, E> {
        Ok(u64::try_from(v).map_or_else(|_| wide(v as f64), Value::from))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(wide(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        YamlValue::deserialize(deserializer).map(|v| v.0)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(YamlValue(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        // Keys are read as text, as `serde_json::Value` reads them (`200:` is "200").
        while let Some(key) = map.next_key::<String>()? {
            let YamlValue(value) = map.next_value()?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_beyond_64_bits_become_floats_and_the_rest_is_as_serde_json_reads_it() {
        let text = "a: 18446744073709552000\nb: -170141183460469231731687303715884105728\nc: 18446744073709551615\nd: -9223372036854775808\n200: {x: [1, 2.5, 'y', true, null]}\n";
        let value = parse(text).unwrap();
        assert_eq!(value["a"].as_f64(), Some(18446744073709552000.0));
        assert!(value["a"].is_f64());
        assert_eq!(value["b"].as_f64(), Some(-1.7014118346046923e38));
        assert_eq!(value["c"].as_u64(), Some(u64::MAX));
        assert_eq!(value["d"].as_i64(), Some(i64::MIN));
        let plain: Value = serde_norway::from_str("200: {x: [1, 2.5, 'y', true, null]}\n").unwrap();
        assert_eq!(value["200"], plain["200"]);
        // serde_json's own value refuses the document.
        assert!(serde_norway::from_str::<Value>(text).is_err());
    }

    #[test]
    fn keys_keep_document_order() {
        let value = parse("z: 1\na: 2\nm: 3\n").unwrap();
        let keys: Vec<&String> = value.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["z", "a", "m"]);
    }
}
