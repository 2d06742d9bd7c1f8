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
