//! Property tests of the interpreter on generated inputs (issue 27 item 6): the actions
//! printed straight into the output (`toJson`, `printf "%q"`) give what the general path
//! gives, and `toJson` of the input reads back as the input.

use proptest::prelude::*;
use serde_json::{Map, Value};

use super::format;
use super::{Dialect, Limits, Template};

const LIMITS: Limits = Limits {
    max_steps: 1_000_000,
    max_output: 1 << 22,
};

fn run(source: &str, input: &Value) -> String {
    Template::parse(source, Dialect { v2: true })
        .unwrap_or_else(|e| panic!("{source}: {e}"))
        .execute_json(input, LIMITS)
        .unwrap_or_else(|e| panic!("{source}: {e}"))
}

fn text() -> impl Strategy<Value = String> {
    "[ a-z\"\\\\<>&\n\t\u{1}\u{7f}é\u{2028}\u{2029}\u{200b}\u{FEFF}中\u{1F600}]{0,8}"
}

/// JSON values as Go's decoder gives them: integers, strings, booleans, null, lists and maps.
fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-1_000_000i64..1_000_000).prop_map(Value::from),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 32, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((text(), inner), 0..5)
                .prop_map(|entries| Value::Object(entries.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn direct_actions_print_what_the_general_path_prints(
        map in prop::collection::vec((text(), json()), 0..6),
    ) {
        let input = Value::Object(map.into_iter().collect());
        // Actions that declare a variable take the general path; printing it is the same text.
        let direct = run(r#"{{range $k, $v := .}}{{printf "%q" $k}}:{{toJson $v}},{{end}}"#, &input);
        let general = run(
            r#"{{range $k, $v := .}}{{$q := printf "%q" $k}}{{$q}}:{{$j := toJson $v}}{{$j}},{{end}}"#,
            &input,
        );
        prop_assert_eq!(&direct, &general);
    }

    #[test]
    fn to_json_reads_back_as_the_input(input in json()) {
        let out = run("{{toJson .}}", &input);
        let back: Value = serde_json::from_str(&out).map_err(|e| TestCaseError::fail(format!("{e}: {out}")))?;
        prop_assert_eq!(back, input);
    }

    #[test]
    fn floats_in_json_are_go_s_form(bits in any::<u64>(), scale in -30i32..30) {
        // Any finite float, and floats spread over the decimal exponents either side of
        // where Go switches to exponent form (1e-6, 1e21).
        for f in [f64::from_bits(bits), (bits as f64 / u64::MAX as f64) * 10f64.powi(scale)] {
            let Some(go) = format::float_json(f) else { continue };
            let mut out = String::new();
            prop_assert!(format::to_json(&mut out, super::value::View::Float(f)).is_ok());
            prop_assert_eq!(out, go);
        }
    }

    #[test]
    fn quoting_runs_of_text_is_quoting_each_character(s in text()) {
        // Each character quoted alone, its quotes dropped, then joined.
        let mut each = String::from("\"");
        let mut json_each = String::from("\"");
        for c in s.chars() {
            let one = format::quote(&c.to_string());
            each.push_str(&one[1..one.len() - 1]);
            let mut j = String::new();
            format::json_string(&mut j, &c.to_string());
            json_each.push_str(&j[1..j.len() - 1]);
        }
        each.push('"');
        json_each.push('"');
        prop_assert_eq!(format::quote(&s), each);
        let mut json = String::new();
        format::json_string(&mut json, &s);
        prop_assert_eq!(json, json_each);
    }
}

/// The Azure providers' flatten transform, as the registry writes it.
const FLATTEN: &str = r#"{"value": [
{{- range $i, $row := index . "value" }}{{ if $i }},{{ end }}
  { {{ $p := index $row "properties" }}{{ if eq (kindOf $p) "map" }}{{ range $k, $v := $p }}{{ printf "%q" $k }}: {{ toJson $v }}, {{ end }}{{ end }}{{ range $k, $v := $row }}{{ printf "%q" $k }}: {{ toJson $v }}, {{ end }}"_flattened": true }
{{- end }}
], "nextLink": {{ toJson (index . "nextLink") }}}"#;

/// Keys of Azure-shaped rows: a few, with case variants, `properties` among them.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("properties".to_owned()),
        Just("name".to_owned()),
        Just("Name".to_owned()),
        Just("id".to_owned()),
        Just("_flattened".to_owned()),
        text(),
    ]
}

/// An Azure-shaped row: members, and `properties` an object (most often) or any value.
fn arm_row() -> impl Strategy<Value = Value> {
    let members = prop::collection::vec((key(), json()), 0..6);
    let properties = prop_oneof![
        3 => prop::collection::vec((key(), json()), 0..6)
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        1 => json(),
    ];
    (members, properties, any::<bool>()).prop_map(|(members, properties, with)| {
        let mut row: Map<String, Value> = members.into_iter().collect();
        if with {
            row.insert("properties".to_owned(), properties);
        }
        Value::Object(row)
    })
}

/// An Azure list body; now and then a row or the list that the compiled form leaves to the
/// interpreter (not an object, not a list).
fn arm_body() -> impl Strategy<Value = Value> {
    let row = prop_oneof![8 => arm_row(), 1 => json()];
    let list = prop_oneof![
        8 => prop::collection::vec(row, 0..5).prop_map(Value::Array),
        1 => json(),
    ];
    let next = prop_oneof![Just(Value::Null), text().prop_map(Value::String)];
    (list, next, any::<bool>()).prop_map(|(list, next, with_next)| {
        let mut body = Map::new();
        body.insert("value".to_owned(), list);
        if with_next {
            body.insert("nextLink".to_owned(), next);
        }
        Value::Object(body)
    })
}

/// The rows of a flatten output as (key, value) lists, in order, repeated keys kept.
fn rows_of(out: &str) -> Vec<Vec<(String, Value)>> {
    #[derive(serde::Deserialize)]
    struct Page {
        value: Vec<Pairs>,
    }
    struct Pairs(Vec<(String, Value)>);
    impl<'de> serde::Deserialize<'de> for Pairs {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct Visit;
            impl<'de> serde::de::Visitor<'de> for Visit {
                type Value = Pairs;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("an object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(
                    self,
                    mut map: A,
                ) -> Result<Pairs, A::Error> {
                    let mut pairs = Vec::new();
                    while let Some(pair) = map.next_entry()? {
                        pairs.push(pair);
                    }
                    Ok(Pairs(pairs))
                }
            }
            d.deserialize_map(Visit)
        }
    }
    let page: Page = serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"));
    page.value.into_iter().map(|p| p.0).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn the_compiled_flatten_writes_what_the_interpreter_writes(input in arm_body()) {
        let template = Template::parse(FLATTEN, Dialect { v2: true }).unwrap();
        prop_assert!(template.flatten.is_some());
        let body = serde_json::to_vec(&input).unwrap();
        let doc = super::doc::Doc::of_json(&input);
        let interpreted = template.execute_doc(&doc, LIMITS, 0).map_err(|e| e.to_string());
        let whole = template
            .execute_json_body(&body, LIMITS, None)
            .map_err(|e| e.to_string())
            .map(Option::unwrap_or_default);
        prop_assert_eq!(&whole, &interpreted);
        // Where the compiled form runs, the interpreter's steps stay within its charge.
        let mut out = String::new();
        let flatten = template.flatten.as_ref().unwrap();
        if let Some(steps) = flatten.run(&doc, u64::MAX, usize::MAX, None, &mut out) {
            prop_assert_eq!(Ok(&out), interpreted.as_ref());
            let bounded = Limits { max_steps: steps, ..LIMITS };
            prop_assert!(template.execute_doc(&doc, bounded, 0).is_ok());
        }
    }

    #[test]
    fn the_compiled_flatten_keeps_the_columns_members_in_order(
        rows in prop::collection::vec(arm_row(), 0..5),
        columns in prop::collection::vec(key(), 0..3),
    ) {
        let input = serde_json::json!({"value": rows, "nextLink": "n"});
        let template = Template::parse(FLATTEN, Dialect { v2: true }).unwrap();
        let body = serde_json::to_vec(&input).unwrap();
        let whole = template.execute_json_body(&body, LIMITS, None).unwrap().unwrap();
        // Keys Go quotes outside JSON (`"\x01"`) make no JSON text to compare.
        prop_assume!(serde_json::from_str::<Value>(&whole).is_ok());
        let kept = template
            .execute_json_body(&body, LIMITS, Some(&columns))
            .unwrap()
            .unwrap();
        // The members named by a column, then the template's own closing member.
        let expected: Vec<Vec<(String, Value)>> = rows_of(&whole)
            .into_iter()
            .map(|mut row| {
                let last = row.pop();
                row.into_iter()
                    .filter(|(k, _)| columns.iter().any(|c| c.eq_ignore_ascii_case(k)))
                    .chain(last)
                    .collect()
            })
            .collect();
        prop_assert_eq!(rows_of(&kept), expected);
        let next: Value = serde_json::from_str(&kept).unwrap();
        prop_assert_eq!(&next["nextLink"], "n");
    }

    #[test]
    fn a_body_decoded_for_the_columns_gives_what_the_whole_body_gives(
        input in arm_body(),
        columns in prop::collection::vec(key(), 0..3),
        max_steps in prop_oneof![Just(u64::MAX), 0..2_000_u64],
    ) {
        let template = Template::parse(FLATTEN, Dialect { v2: true }).unwrap();
        let body = serde_json::to_vec(&input).unwrap();
        let limits = Limits { max_steps, ..LIMITS };
        // Over the whole body: the compiled form with the columns, else the interpreter.
        let doc = super::doc::Doc::of_json(&input);
        let mut out = String::new();
        let flatten = template.flatten.as_ref().unwrap();
        let matcher = super::flatten::Columns::new(&columns);
        let whole = match flatten.run(&doc, max_steps, LIMITS.max_output, Some(&matcher), &mut out) {
            Some(_) => Ok(out),
            None => template.execute_doc(&doc, limits, 0).map_err(|e| e.to_string()),
        };
        let projected = template
            .execute_json_body(&body, limits, Some(&columns))
            .map_err(|e| e.to_string())
            .map(Option::unwrap_or_default);
        prop_assert_eq!(projected, whole);
    }
}

#[test]
fn the_flatten_shape_is_recognized_only_as_written() {
    let compiled = |source: &str| {
        Template::parse(source, Dialect { v2: true })
            .unwrap()
            .flatten
            .is_some()
    };
    assert!(compiled(FLATTEN));
    // Another nested key, another function, shadowing loop variables, a range with else.
    assert!(!compiled(&FLATTEN.replace(r#""properties""#, r#""props""#)));
    assert!(!compiled(&FLATTEN.replace("toJson $v", "print $v")));
    assert!(!compiled(&FLATTEN.replace(
        r#"$k, $v := $row }}{{ printf "%q" $k }}: {{ toJson $v }}"#,
        r#"$k, $p := $row }}{{ printf "%q" $k }}: {{ toJson $p }}"#
    )));
    assert!(!compiled(&FLATTEN.replace(
        r#"{{ printf "%q" $k }}: {{ toJson $v }}, {{ end }}"_flattened""#,
        r#"{{ printf "%q" $k }}: {{ toJson $v }}, {{ else }}x{{ end }}"_flattened""#
    )));
    assert!(!compiled("{{ range . }}{{ . }}{{ end }}"));
}
