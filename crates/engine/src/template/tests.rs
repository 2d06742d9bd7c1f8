//! Expected outputs are Go's (`text/template` as documented, `fmt`, `encoding/json`).

use serde_json::json;

use super::{Dialect, Limits, Template, TemplateError};

const V3: Dialect = Dialect { v2: true };
const LIMITS: Limits = Limits {
    max_steps: 100_000,
    max_output: 1 << 20,
};

fn run(source: &str, input: serde_json::Value) -> String {
    Template::parse(source, V3)
        .unwrap_or_else(|e| panic!("{source}: {e}"))
        .execute_json(&input, LIMITS)
        .unwrap_or_else(|e| panic!("{source}: {e}"))
}

fn exec_err(source: &str, input: serde_json::Value) -> String {
    match Template::parse(source, V3)
        .unwrap()
        .execute_json(&input, LIMITS)
    {
        Err(TemplateError::Exec { message, .. }) => message,
        other => panic!("{source}: expected an execution error, got {other:?}"),
    }
}

fn parse_err(source: &str) -> String {
    match Template::parse(source, V3) {
        Err(TemplateError::Parse { message, .. }) => message,
        other => panic!("{source}: expected a parse error, got {other:?}"),
    }
}

#[test]
fn text_and_dot() {
    assert_eq!(run("plain", json!(null)), "plain");
    assert_eq!(run("{{.}}", json!("x")), "x");
    assert_eq!(run("a{{.name}}b", json!({"name": "n"})), "anb");
    assert_eq!(run("{{.a.b}}", json!({"a": {"b": true}})), "true");
}

#[test]
fn missing_and_nil_print_no_value() {
    assert_eq!(run("{{.missing}}", json!({})), "<no value>");
    assert_eq!(run(r#"{{index . "k"}}"#, json!({"k": null})), "<no value>");
    assert_eq!(run("{{printf \"%v\" .missing}}", json!({})), "<nil>");
}

#[test]
fn numbers_print_as_go_float64() {
    assert_eq!(run("{{.n}}", json!({"n": 200})), "200");
    assert_eq!(run("{{.n}}", json!({"n": 123456})), "123456");
    assert_eq!(run("{{.n}}", json!({"n": 1234567})), "1.234567e+06");
    assert_eq!(run("{{.n}}", json!({"n": 1000000})), "1e+06");
    assert_eq!(run("{{.n}}", json!({"n": 0.5})), "0.5");
    assert_eq!(run("{{.n}}", json!({"n": 0.00001})), "1e-05");
    assert_eq!(run("{{.n}}", json!({"n": -2.5})), "-2.5");
    assert_eq!(run("{{kindOf .n}}", json!({"n": 3})), "float64");
    assert_eq!(run("{{3}} {{kindOf 3}} {{1.5}}", json!(null)), "3 int 1.5");
}

#[test]
fn composite_values_print_as_fmt() {
    assert_eq!(
        run("{{.}}", json!({"b": [1, "x"], "a": null})),
        "map[a:<nil> b:[1 x]]"
    );
}

#[test]
fn trimming() {
    assert_eq!(run("a  {{- \"b\" -}}  c", json!(null)), "abc");
    assert_eq!(run("a\n\t{{- 3}}\n", json!(null)), "a3\n");
    assert_eq!(run("{{3 -}}\n\n x", json!(null)), "3x");
    // `{{-3}}` is the number -3, not a trim marker.
    assert_eq!(run("a {{-3}}", json!(null)), "a -3");
    assert_eq!(run("a {{- /* note */ -}} b", json!(null)), "ab");
    assert_eq!(run("a{{/* note */}}b", json!(null)), "ab");
}

#[test]
fn if_else_chain() {
    let t = "{{if eq . 1.0}}one{{else if eq . 2.0}}two{{else}}many{{end}}";
    assert_eq!(run(t, json!(1)), "one");
    assert_eq!(run(t, json!(2)), "two");
    assert_eq!(run(t, json!(9)), "many");
    assert_eq!(run("{{if .}}y{{else}}n{{end}}", json!([])), "n");
    assert_eq!(run("{{if .}}y{{else}}n{{end}}", json!("")), "n");
    assert_eq!(run("{{if .}}y{{else}}n{{end}}", json!({"a": 1})), "y");
    assert_eq!(run("{{if .x}}y{{else}}n{{end}}", json!({})), "n");
}

#[test]
fn with_sets_dot_and_else_with() {
    assert_eq!(run("{{with .a}}{{.b}}{{end}}", json!({"a": {"b": 5}})), "5");
    assert_eq!(run("{{with .a}}x{{else}}none{{end}}", json!({})), "none");
    assert_eq!(
        run(
            "{{with .a}}a{{else with .b}}{{.}}{{end}}",
            json!({"b": "bee"})
        ),
        "bee"
    );
}

#[test]
fn range_slices_maps_and_else() {
    assert_eq!(
        run(
            "{{range $i, $v := .}}{{$i}}={{$v}};{{end}}",
            json!(["a", "b"])
        ),
        "0=a;1=b;"
    );
    assert_eq!(run("{{range .}}[{{.}}]{{end}}", json!([1, 2])), "[1][2]");
    // Maps in sorted key order, whatever the document order.
    assert_eq!(
        run(
            "{{range $k, $v := .}}{{$k}}:{{$v}} {{end}}",
            json!({"b": 2, "a": 1, "c": 3})
        ),
        "a:1 b:2 c:3 "
    );
    assert_eq!(run("{{range .}}x{{else}}empty{{end}}", json!([])), "empty");
    assert_eq!(run("{{range .}}x{{else}}empty{{end}}", json!([1])), "x");
    // Over nil: no iteration, no error.
    assert_eq!(
        run("{{range .missing}}x{{else}}none{{end}}", json!({})),
        "none"
    );
    assert_eq!(run("{{range $v := .}}{{$v}}{{end}}", json!([7])), "7");
    assert_eq!(run("{{range 3}}{{.}}{{end}}", json!(null)), "012");
}

#[test]
fn range_break_continue() {
    let t =
        "{{range .}}{{if eq . 2.0}}{{continue}}{{end}}{{if eq . 4.0}}{{break}}{{end}}{{.}}{{end}}";
    assert_eq!(run(t, json!([1, 2, 3, 4, 5])), "13");
    assert!(parse_err("{{break}}").contains("outside {{range}}"));
}

#[test]
fn range_over_a_string_fails() {
    assert!(exec_err("{{range .}}{{end}}", json!("abc")).contains("range can't iterate over abc"));
}

#[test]
fn variables_scope_and_assignment() {
    assert_eq!(run("{{$x := 1}}{{$x}}", json!(null)), "1");
    assert_eq!(run("{{$x := 1}}{{$x = 2}}{{$x}}", json!(null)), "2");
    // Assignment inside a range changes the outer variable.
    assert_eq!(
        run(
            "{{$first := true}}{{range .}}{{if not $first}},{{end}}{{$first = false}}{{.}}{{end}}",
            json!(["a", "b", "c"])
        ),
        "a,b,c"
    );
    // A declaration inside `if` ends with it.
    assert!(parse_err("{{if true}}{{$y := 1}}{{end}}{{$y}}").contains("undefined variable \"$y\""));
    assert!(parse_err("{{$z = 1}}").contains("undefined variable"));
    assert_eq!(
        run(
            "{{range .l}}{{$.top}}{{end}}",
            json!({"top": "T", "l": [1, 2]})
        ),
        "TT"
    );
}

#[test]
fn pipelines_and_parens() {
    assert_eq!(run("{{. | printf \"%s!\"}}", json!("hi")), "hi!");
    assert_eq!(
        run("{{\"a\" | printf \"%s-%s\" \"b\"}}", json!(null)),
        "b-a"
    );
    assert_eq!(run("{{(index . 1).n}}", json!([{"n": 1}, {"n": 2}])), "2");
    assert!(exec_err("{{. | .}}", json!(1)).contains("can't give argument to non-function"));
}

#[test]
fn index_semantics() {
    assert_eq!(run(r#"{{index . "a" "b"}}"#, json!({"a": {"b": "x"}})), "x");
    assert_eq!(run("{{index . 1}}", json!(["a", "b"])), "b");
    assert_eq!(run(r#"{{index . "none"}}"#, json!({})), "<no value>");
    assert!(exec_err("{{index . 5}}", json!([1])).contains("index out of range: 5"));
    assert!(exec_err(r#"{{index (index . "a") "b"}}"#, json!({})).contains("index of untyped nil"));
    assert!(exec_err("{{index . 1}}", json!({"a": 1})).contains("should be string"));
}

#[test]
fn slice_and_len() {
    assert_eq!(run("{{slice . 1 3}}", json!("abcd")), "bc");
    assert_eq!(run("{{slice . 1}}", json!([1, 2, 3])), "[2 3]");
    assert_eq!(run("{{len .}}", json!([1, 2, 3])), "3");
    assert_eq!(run("{{len .}}", json!({"a": 1})), "1");
    assert_eq!(run("{{len .}}", json!("héllo")), "6");
    assert!(exec_err("{{len .x}}", json!({})).contains("len of nil pointer"));
}

#[test]
fn comparisons() {
    assert_eq!(
        run("{{eq 1 1}} {{eq 1 2 1}} {{ne \"a\" \"b\"}}", json!(null)),
        "true true true"
    );
    assert_eq!(
        run(
            "{{lt 1 2}} {{le 2 2}} {{gt \"b\" \"a\"}} {{ge 1.5 2.5}}",
            json!(null)
        ),
        "true true true false"
    );
    // nil against a value of another kind is unequal, not an error.
    assert_eq!(run(r#"{{eq .x "a"}}"#, json!({})), "false");
    assert!(exec_err("{{eq 1 1.0}}", json!(null)).contains("incompatible types for comparison"));
    assert!(exec_err("{{lt true false}}", json!(null)).contains("invalid type for comparison"));
}

#[test]
fn and_or_not_are_lazy_and_return_operands() {
    assert_eq!(
        run("{{and 1 0 2}} {{or 0 \"\" \"x\"}} {{not 0}}", json!(null)),
        "0 x true"
    );
    // `and` stops before evaluating the failing call.
    assert_eq!(run("{{and .x (index .x 0)}}", json!({})), "<no value>");
    assert_eq!(
        run(
            "{{if and .z (gt (len .z) 0)}}y{{else}}n{{end}}",
            json!({"z": []})
        ),
        "n"
    );
}

#[test]
fn printf_verbs() {
    assert_eq!(
        run(r#"{{printf "%q" "a\"b\n"}}"#, json!(null)),
        r#""a\"b\n""#
    );
    assert_eq!(
        run(r#"{{printf "%s=%d %t %v %%" "k" 3 true 2.5}}"#, json!(null)),
        "k=3 true 2.5 %"
    );
    assert_eq!(
        run(r#"{{printf "%5s|%-3d|%03d" "a" 7 5}}"#, json!(null)),
        "    a|7  |005"
    );
    assert_eq!(
        run(r#"{{printf "%.2f %x" 3.14159 255}}"#, json!(null)),
        "3.14 ff"
    );
    assert_eq!(run(r#"{{printf "%d" "s"}}"#, json!(null)), "%!d(string=s)");
    assert_eq!(
        run(r#"{{printf "%s %s" "a"}}"#, json!(null)),
        "a %!s(MISSING)"
    );
    assert_eq!(run(r#"{{printf "%s" .x}}"#, json!({})), "%!s(<nil>)");
    assert_eq!(run(r#"{{printf "%q" "\x01é"}}"#, json!(null)), r#""\x01é""#);
}

#[test]
fn print_and_println() {
    assert_eq!(run(r#"{{print 1 2 "a" 3}}"#, json!(null)), "1 2a3");
    assert_eq!(run(r#"{{println 1 "a"}}"#, json!(null)), "1 a\n");
}

#[test]
fn escapers() {
    assert_eq!(
        run(r#"{{html "<a href='x'>&"}}"#, json!(null)),
        "&lt;a href=&#39;x&#39;&gt;&amp;"
    );
    assert_eq!(run(r#"{{urlquery "a b&c"}}"#, json!(null)), "a+b%26c");
    assert_eq!(run(r#"{{js "a'b<"}}"#, json!(null)), r"a\'b\u003C");
}

#[test]
fn to_json_as_encoding_json() {
    assert_eq!(
        run(
            "{{toJson .}}",
            json!({"b": 1, "a": [true, null, "<&>"], "c": 1.5})
        ),
        r#"{"a":[true,null,"\u003c\u0026\u003e"],"b":1,"c":1.5}"#
    );
    assert_eq!(run("{{toJson .x}}", json!({})), "null");
    assert_eq!(
        run("{{toJson 3}} {{toJson \"s\"}}", json!(null)),
        r#"3 "s""#
    );
    assert_eq!(run("{{toJson .}}", json!(1e21)), "1e+21");
    assert_eq!(run("{{toJson .}}", json!(0.0000001)), "1e-7");
    assert_eq!(run("{{toJson .}}", json!(12345678)), "12345678");
}

#[test]
fn kind_of() {
    assert_eq!(
        run(
            "{{kindOf .m}} {{kindOf .s}} {{kindOf .t}} {{kindOf .b}} {{kindOf .x}}",
            json!({"m": {}, "s": [], "t": "", "b": false})
        ),
        "map slice string bool invalid"
    );
}

#[test]
fn stackql_helpers() {
    assert_eq!(
        run(
            r#"{{toBool "true"}} {{toBool 1}} {{toInt "42x"}} {{toInt 3.9}}"#,
            json!(null)
        ),
        "true false 42 3"
    );
    assert_eq!(
        run(
            r#"{{safeIndex . "a"}} {{safeIndex .none "a"}}"#,
            json!({"a": 1})
        ),
        "1 <no value>"
    );
    assert_eq!(run("{{plus1 1}}", json!(null)), "2");
    assert!(exec_err("{{plus1 .}}", json!(1)).contains("expected int; got float64"));
    assert_eq!(
        run(
            r#"{{$m := jsonMapFromString "{\"a\":[1,2]}"}}{{index $m "a" 1}}"#,
            json!(null)
        ),
        "2"
    );
    assert!(
        exec_err(r#"{{jsonMapFromString "[1]"}}"#, json!(null)).contains("cannot unmarshal array")
    );
}

#[test]
fn text_dialect_input_is_the_body_string() {
    let t = Template::parse(
        r#"{{- $wrapped := printf "{\"items\":%s}" . -}}{{- $wrapped -}}"#,
        V3,
    )
    .unwrap();
    assert_eq!(
        t.execute_text("[1, 2]", LIMITS).unwrap(),
        r#"{"items":[1, 2]}"#
    );
}

#[test]
fn version_one_lacks_to_json() {
    let err = Template::parse("{{toJson .}}", Dialect { v2: false }).unwrap_err();
    assert_eq!(
        err,
        TemplateError::Parse {
            line: 1,
            message: "function \"toJson\" not defined".to_owned()
        }
    );
}

#[test]
fn parse_errors() {
    assert!(parse_err("{{nope 1}}").contains("function \"nope\" not defined"));
    assert!(parse_err("{{if .}}x").contains("unexpected EOF"));
    assert!(parse_err("{{end}}").contains("unexpected {{end}}"));
    assert!(parse_err("{{define \"x\"}}{{end}}").contains("not supported"));
    assert!(matches!(
        Template::parse("{{.", V3),
        Err(TemplateError::Parse { .. })
    ));
    assert!(parse_err("{{\"abc}}").contains("unterminated"));
}

#[test]
fn error_lines_count_from_one() {
    match Template::parse("a\nb\n{{index . 9}}", V3)
        .unwrap()
        .execute_json(&json!([]), LIMITS)
    {
        Err(TemplateError::Exec { line, .. }) => assert_eq!(line, 3),
        other => panic!("{other:?}"),
    }
}

#[test]
fn steps_and_output_are_bounded() {
    let t = Template::parse("{{range .}}{{range $}}x{{end}}{{end}}", V3).unwrap();
    let input = serde_json::Value::Array(vec![json!(1); 1000]);
    let small = Limits {
        max_steps: 10_000,
        max_output: 1 << 30,
    };
    assert!(
        matches!(t.execute_json(&input, small), Err(TemplateError::Limit(m)) if m.contains("steps"))
    );
    let narrow = Limits {
        max_steps: u64::MAX,
        max_output: 100,
    };
    assert!(
        matches!(t.execute_json(&input, narrow), Err(TemplateError::Limit(m)) if m.contains("output"))
    );
}

#[test]
fn azure_flatten_template() {
    let t = r#"{"value": [
{{- range $i, $row := index . "value" }}{{ if $i }},{{ end }}
  { {{ $p := index $row "properties" }}{{ if eq (kindOf $p) "map" }}{{ range $k, $v := $p }}{{ printf "%q" $k }}: {{ toJson $v }}, {{ end }}{{ end }}{{ range $k, $v := $row }}{{ printf "%q" $k }}: {{ toJson $v }}, {{ end }}"_flattened": true }
{{- end }}
], "nextLink": {{ toJson (index . "nextLink") }}}"#;
    let out = run(
        t,
        json!({"value": [
            {"name": "vm1", "id": "/x/vm1", "properties": {"vmId": "u1", "hw": {"size": "B1"}}},
            {"name": "vm2", "id": "/x/vm2"}
        ]}),
    );
    assert_eq!(
        out,
        "{\"value\": [\n  { \"hw\": {\"size\":\"B1\"}, \"vmId\": \"u1\", \"id\": \"/x/vm1\", \"name\": \"vm1\", \"properties\": {\"hw\":{\"size\":\"B1\"},\"vmId\":\"u1\"}, \"_flattened\": true },\n  { \"id\": \"/x/vm2\", \"name\": \"vm2\", \"_flattened\": true }\n], \"nextLink\": null}"
    );
    let parsed: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(parsed["value"][0]["vmId"], "u1");
}
