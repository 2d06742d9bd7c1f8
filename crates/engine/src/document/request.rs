//! How a method's request body is made, as the method definition declares it: `request.base`
//! (the object a body starts from), `request.default` (the body sent when the statement
//! gives no body field) and `config.requestBodyTranslate` (how SQL names map to body fields);
//! and how the finished request is put on the wire: `config.requestTranslate`,
//! `config.queryParamTranspose` and `request.transform`.

use std::sync::Arc;

use serde_json::{Map, Value};

/// `config.requestBodyTranslate.algorithm`, as any-sdk reads it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum BodyTranslate {
    /// No algorithm (or `default`): body fields are named `data__<field>` in SQL (a
    /// required field also answers to its own name).
    #[default]
    Prefixed,
    /// `naive`: body fields answer to their own names; `naive_<Key>` (`naive_DesiredState`)
    /// takes the fields of the body's `<Key>` object and puts them there.
    Naive { parent: Option<String> },
}

impl BodyTranslate {
    /// The object of the body the fields live in (`DesiredState`), if not the top level.
    pub(crate) fn parent(&self) -> Option<&str> {
        match self {
            BodyTranslate::Naive { parent } => parent.as_deref(),
            BodyTranslate::Prefixed => None,
        }
    }
}

/// `config.requestTranslate.algorithm`: how the built request is changed before it is
/// signed and sent, as any-sdk's `requesttranslate` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum WireTranslate {
    /// None (or an algorithm any-sdk does not know, which it ignores too).
    #[default]
    None,
    /// `get_query_to_post_form_utf_8`: the query string becomes the body of a POST
    /// (`application/x-www-form-urlencoded; charset=utf-8`), the URL keeps no query (the
    /// AWS query protocol: IAM, SNS, RDS, EC2, CloudFormation…).
    QueryToPostForm,
    /// `drop_double_underscore_params`: query parameters whose names start with `__` are
    /// dropped (Cloud Control's `…&__Bucket&__detailTransformed=true`).
    DropDoubleUnderscore,
}

impl WireTranslate {
    /// The algorithm named in the nearest `config` that names one (case-insensitive, as
    /// any-sdk compares it).
    pub(crate) fn from_configs<'a>(configs: impl IntoIterator<Item = &'a Value>) -> Self {
        let algorithm = configs
            .into_iter()
            .find_map(|c| c.get("requestTranslate")?.get("algorithm")?.as_str())
            .map(|a| a.trim().to_ascii_lowercase());
        match algorithm.as_deref() {
            Some("get_query_to_post_form_utf_8") => WireTranslate::QueryToPostForm,
            Some("drop_double_underscore_params") => WireTranslate::DropDoubleUnderscore,
            _ => WireTranslate::None,
        }
    }
}

/// `config.queryParamTranspose.algorithm` `AWSCanonical` in the nearest `config` that
/// names an algorithm: a query parameter whose value is a JSON object or array is sent as
/// AWS's flattened members (`Filter.1.Name=…`).
pub(crate) fn aws_canonical_from_configs<'a>(configs: impl IntoIterator<Item = &'a Value>) -> bool {
    configs
        .into_iter()
        .find_map(|c| c.get("queryParamTranspose")?.get("algorithm")?.as_str())
        .is_some_and(|a| a.trim() == "AWSCanonical")
}

/// The request settings of a method definition.
#[derive(Debug, Clone, Default)]
pub(crate) struct RequestSpec {
    /// `request.mediaType`.
    pub(crate) media_type: Option<String>,
    /// `request.base`: a JSON object the given body fields are merged over.
    pub(crate) base: Option<Map<String, Value>>,
    /// `request.default`: the JSON body sent when no body field is given.
    pub(crate) default: Option<Value>,
    pub(crate) translate: BodyTranslate,
    /// `config.requestTranslate` (method, resource, service document, provider).
    pub(crate) wire: WireTranslate,
    /// `config.queryParamTranspose` `AWSCanonical` (method, resource, service document,
    /// provider).
    pub(crate) aws_canonical: bool,
    /// `request.transform`: a Go template over the JSON body whose output is the body sent.
    pub(crate) transform: Option<Arc<crate::template::Template>>,
}

impl RequestSpec {
    /// Reads the method definition `def` (and its resource's `config` for the translate
    /// algorithm, when the method names none). A `base` that is not a JSON object is an
    /// error; a `default` that is not JSON is left out.
    pub(crate) fn parse(
        def: &Value,
        resource_config: Option<&Value>,
    ) -> std::result::Result<Self, String> {
        let request = def.get("request");
        let text = |key: &str| request.and_then(|r| r.get(key)).and_then(Value::as_str);
        let base = match text("base") {
            Some(raw) => match serde_json::from_str::<Value>(raw) {
                Ok(Value::Object(map)) => Some(map),
                _ => return Err("request.base is not a JSON object".to_owned()),
            },
            None => None,
        };
        // awscc's tagging documents write `'{}'`: JSON in single quotes is read as the JSON.
        // A default that is not JSON either way is not sent (the method sends no body).
        let default = text("default").and_then(|raw| {
            let raw = raw.trim();
            serde_json::from_str::<Value>(raw).ok().or_else(|| {
                raw.strip_prefix('\'')
                    .and_then(|r| r.strip_suffix('\''))
                    .and_then(|inner| serde_json::from_str::<Value>(inner).ok())
            })
        });
        let algorithm = [def.get("config"), resource_config]
            .into_iter()
            .flatten()
            .find_map(|c| {
                c.get("requestBodyTranslate")?
                    .get("algorithm")?
                    .as_str()
                    .map(str::trim)
            });
        let translate = match algorithm {
            Some("naive") => BodyTranslate::Naive { parent: None },
            Some(a) if a.starts_with("naive_") => BodyTranslate::Naive {
                parent: Some(a["naive_".len()..].to_owned()),
            },
            _ => BodyTranslate::Prefixed,
        };
        let transform = match request.and_then(|r| r.get("transform")) {
            Some(transform) => {
                let kind = transform.get("type").and_then(Value::as_str).unwrap_or("");
                match crate::transform::json_template_dialect(kind) {
                    Some(dialect) => {
                        let body = transform.get("body").and_then(Value::as_str).unwrap_or("");
                        let template = crate::template::Template::parse(body, dialect)
                            .map_err(|err| format!("request.transform ({kind}): {err}"))?;
                        Some(Arc::new(template))
                    }
                    None => {
                        return Err(format!(
                            "request.transform type '{kind}' is not supported (golang_template_json_* is)"
                        ));
                    }
                }
            }
            None => None,
        };
        Ok(RequestSpec {
            media_type: text("mediaType").map(str::to_owned),
            base,
            default,
            translate,
            wire: WireTranslate::None,
            aws_canonical: false,
            transform,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn base_default_and_translate_are_read() {
        let def = json!({
            "config": {"requestBodyTranslate": {"algorithm": "naive_DesiredState"}},
            "request": {"mediaType": "application/x-amz-json-1.0",
                        "base": "{\n  \"TypeName\": \"AWS::S3::Bucket\"\n}",
                        "default": "{\"MaxResults\": 5}"}
        });
        let spec = RequestSpec::parse(&def, None).unwrap();
        assert_eq!(
            spec.media_type.as_deref(),
            Some("application/x-amz-json-1.0")
        );
        assert_eq!(
            spec.base.map(Value::Object),
            Some(json!({"TypeName": "AWS::S3::Bucket"}))
        );
        assert_eq!(spec.default, Some(json!({"MaxResults": 5})));
        assert_eq!(spec.translate.parent(), Some("DesiredState"));

        let resource = json!({"requestBodyTranslate": {"algorithm": "naive"}});
        let spec = RequestSpec::parse(&json!({}), Some(&resource)).unwrap();
        assert_eq!(spec.translate, BodyTranslate::Naive { parent: None });
        let spec = RequestSpec::parse(&json!({}), None).unwrap();
        assert_eq!(spec.translate, BodyTranslate::Prefixed);
        for (raw, default) in [("'{}'\n", Some(json!({}))), ("{nope", None)] {
            let def = json!({"request": {"default": raw}});
            assert_eq!(
                RequestSpec::parse(&def, None).unwrap().default,
                default,
                "{raw}"
            );
        }
    }

    #[test]
    fn a_base_that_is_not_an_object_is_refused() {
        for base in ["[1]", "not json"] {
            let def = json!({"request": {"base": base}});
            assert!(RequestSpec::parse(&def, None).is_err(), "{base}");
        }
    }
}
