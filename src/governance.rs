//! A tenant's rules on what a statement sends upstream, as pure functions over the requests
//! the engine plans for it ([`PlannedRequest`]): which methods bound to an HTTP method other
//! than GET or HEAD still count as reads (`tenants[].read_methods`), and which parameters
//! may only take given values (`tenants[].pinned_parameters`). No I/O and no logging here:
//! the tool-call pipeline asks the engine for the requests and the gate applies these.

use std::collections::BTreeMap;
use std::fmt;

use crate::engine::{ParamValues, PlannedRequest};
use crate::policy::QueryClass;

/// A tenant's rules on the requests of its statements.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TenantRules {
    /// Methods whose requests are reads whatever their HTTP method.
    pub read_methods: Vec<MethodPattern>,
    /// Parameters whose values are fixed: the name as configured, and the values allowed.
    pub pinned_parameters: BTreeMap<String, Vec<String>>,
}

impl TenantRules {
    /// Whether some parameter is pinned.
    pub fn has_pins(&self) -> bool {
        !self.pinned_parameters.is_empty()
    }

    /// Whether `request` counts as a read: its HTTP method is GET or HEAD, or
    /// `read_methods` names its method.
    pub fn is_read(&self, request: &PlannedRequest) -> bool {
        request.is_read_method() || self.read_methods.iter().any(|p| p.matches(request))
    }
}

/// `provider.service.resource.method`, where a part may be `*` (any).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MethodPattern {
    parts: [String; 4],
}

impl MethodPattern {
    /// Parses `provider.service.resource.method` (four non-empty parts, each a name or `*`).
    pub fn parse(text: &str) -> Result<Self, String> {
        let parts: Vec<&str> = text.split('.').collect();
        let parts: [&str; 4] = parts.try_into().map_err(|_| {
            format!(
                "'{}' must be provider.service.resource.method (a part may be *)",
                text.escape_debug()
            )
        })?;
        if parts.iter().any(|p| p.is_empty()) {
            return Err(format!(
                "'{}' has an empty part; write provider.service.resource.method (a part may be *)",
                text.escape_debug()
            ));
        }
        Ok(MethodPattern {
            parts: parts.map(str::to_owned),
        })
    }

    /// Whether the pattern names `request`'s method.
    pub fn matches(&self, request: &PlannedRequest) -> bool {
        let names = [
            &request.provider,
            &request.service,
            &request.resource,
            &request.method,
        ];
        self.parts
            .iter()
            .zip(names)
            .all(|(part, name)| part == "*" || part == name)
    }
}

impl fmt::Display for MethodPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.parts.join("."))
    }
}

/// The class of a statement of class `class` whose requests are `requests`: a read (class
/// `select`) with a request the tenant does not count as a read runs a method that may do
/// anything, and is classed `lifecycle`, as an EXEC of that method is. Other classes stay.
pub fn bound_class(
    class: QueryClass,
    requests: &[PlannedRequest],
    rules: &TenantRules,
) -> QueryClass {
    match first_write(requests, rules) {
        Some(_) if class == QueryClass::Select => QueryClass::Lifecycle,
        _ => class,
    }
}

/// The first request that is not a read by the tenant's rules.
pub fn first_write<'r>(
    requests: &'r [PlannedRequest],
    rules: &TenantRules,
) -> Option<&'r PlannedRequest> {
    requests.iter().find(|r| !rules.is_read(r))
}

/// A request that gives a pinned parameter a value the tenant does not allow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PinViolation {
    /// The pinned parameter, as configured.
    pub parameter: String,
    /// The values allowed.
    pub allowed: Vec<String>,
    /// `provider.service.resource.method` of the request.
    pub method: String,
    /// What the request would give the parameter.
    pub found: PinFound,
}

/// What a request gives a pinned parameter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PinFound {
    /// A value not allowed.
    Other(String),
    /// None: the request would carry the method's default (or none).
    Omitted,
    /// A value known only while the statement runs.
    Runtime,
}

impl fmt::Display for PinViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let allowed: Vec<String> = self.allowed.iter().map(|v| format!("'{v}'")).collect();
        write!(
            f,
            "parameter '{}' is pinned to {} for this tenant (tenants[].pinned_parameters); ",
            self.parameter,
            allowed.join(", ")
        )?;
        match &self.found {
            PinFound::Other(value) => write!(
                f,
                "the statement gives it '{}' in {}",
                value.escape_debug(),
                self.method
            ),
            PinFound::Omitted => write!(
                f,
                "{} would run with its default: give {} = {} in the statement",
                self.method,
                self.parameter,
                allowed.first().map(String::as_str).unwrap_or("''")
            ),
            PinFound::Runtime => write!(
                f,
                "its value in {} comes from another table's rows or an expression, known only once requests were sent: give it as a literal (= or IN)",
                self.method
            ),
        }?;
        f.write_str("; nothing was sent")
    }
}

/// Checks every request against the tenant's pinned parameters: a request whose method
/// takes a pinned parameter must give it only allowed values, as literals. The first
/// violation, in request order.
pub fn check_pins(requests: &[PlannedRequest], rules: &TenantRules) -> Result<(), PinViolation> {
    for request in requests {
        for (pinned, allowed) in &rules.pinned_parameters {
            for param in request.params.iter().filter(|p| p.is_named(pinned)) {
                let found = match &param.values {
                    ParamValues::Given(values) => {
                        match values.iter().find(|v| !allowed.contains(v)) {
                            Some(other) => PinFound::Other(other.clone()),
                            None => continue,
                        }
                    }
                    ParamValues::Omitted => PinFound::Omitted,
                    ParamValues::Runtime => PinFound::Runtime,
                };
                return Err(PinViolation {
                    parameter: pinned.clone(),
                    allowed: allowed.clone(),
                    method: request.full_method(),
                    found,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::PlannedParam;

    fn request(http: &str, params: &[(&str, ParamValues)]) -> PlannedRequest {
        PlannedRequest {
            provider: "cloud".into(),
            service: "d1".into(),
            resource: "database".into(),
            method: "query".into(),
            http_method: http.into(),
            params: params
                .iter()
                .map(|(name, values)| PlannedParam {
                    name: (*name).into(),
                    sql_name: (*name == "accountId").then(|| "account_id".to_owned()),
                    values: values.clone(),
                })
                .collect(),
        }
    }

    fn rules(read: &[&str], pins: &[(&str, &[&str])]) -> TenantRules {
        TenantRules {
            read_methods: read
                .iter()
                .map(|p| MethodPattern::parse(p).unwrap())
                .collect(),
            pinned_parameters: pins
                .iter()
                .map(|(n, v)| ((*n).to_owned(), v.iter().map(|s| (*s).to_owned()).collect()))
                .collect(),
        }
    }

    #[test]
    fn every_http_method_and_class_with_and_without_the_method_named_as_a_read() {
        let named = rules(&["cloud.d1.database.query"], &[]);
        let wildcard = rules(&["cloud.*.*.*"], &[]);
        let other = rules(&["cloud.d1.database.list"], &[]);
        let none = TenantRules::default();
        for http in ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"] {
            let requests = [request(http, &[])];
            let read = matches!(http, "GET" | "HEAD");
            for class in QueryClass::ALL {
                for (rules, allowed) in [
                    (&named, true),
                    (&wildcard, true),
                    (&other, false),
                    (&none, false),
                ] {
                    let want = if class == QueryClass::Select && !read && !allowed {
                        QueryClass::Lifecycle
                    } else {
                        class
                    };
                    assert_eq!(
                        bound_class(class, &requests, rules),
                        want,
                        "{http} × {class} × {:?}",
                        rules.read_methods
                    );
                }
            }
        }
        // One write among reads is enough; none at all stays a read.
        let mixed = [request("GET", &[]), request("POST", &[])];
        assert_eq!(
            bound_class(QueryClass::Select, &mixed, &none),
            QueryClass::Lifecycle
        );
        assert_eq!(
            bound_class(QueryClass::Select, &[], &none),
            QueryClass::Select
        );
    }

    #[test]
    fn method_patterns_need_four_parts() {
        for bad in ["", "a.b.c", "a.b.c.d.e", "a..c.d", "a.b.c."] {
            assert!(MethodPattern::parse(bad).is_err(), "{bad}");
        }
        let pattern = MethodPattern::parse("cloud.d1.*.query").unwrap();
        assert_eq!(pattern.to_string(), "cloud.d1.*.query");
        assert!(pattern.matches(&request("POST", &[])));
        let mut other = request("POST", &[]);
        other.service = "ai".into();
        assert!(!pattern.matches(&other));
    }

    #[test]
    fn pinned_parameters_take_only_allowed_literals() {
        use ParamValues::*;
        let pins = rules(&[], &[("project", &["sandbox", "dev"])]);
        let given = |values: &[&str]| Given(values.iter().map(|v| (*v).to_owned()).collect());
        let check =
            |values: ParamValues| check_pins(&[request("GET", &[("project", values)])], &pins);
        assert_eq!(check(given(&["sandbox"])), Ok(()));
        assert_eq!(check(given(&["sandbox", "dev"])), Ok(()));
        let found = |values| check(values).map_err(|v| v.found);
        assert_eq!(
            found(given(&["sandbox", "prod"])),
            Err(PinFound::Other("prod".into()))
        );
        // Values are compared exactly.
        assert_eq!(
            found(given(&["Sandbox"])),
            Err(PinFound::Other("Sandbox".into()))
        );
        assert_eq!(found(Omitted), Err(PinFound::Omitted));
        assert_eq!(found(Runtime), Err(PinFound::Runtime));
        // A method without the parameter is not concerned; names match ignoring case.
        assert_eq!(
            check_pins(&[request("GET", &[("zone", Omitted)])], &pins),
            Ok(())
        );
        assert_eq!(
            check_pins(&[request("GET", &[("Project", Omitted)])], &pins).map_err(|v| v.found),
            Err(PinFound::Omitted)
        );
        // The SQL alias of a native-cased name answers too.
        let account = rules(&[], &[("account_id", &["a1"])]);
        assert_eq!(
            check_pins(
                &[request("POST", &[("accountId", given(&["a2"]))])],
                &account
            )
            .map_err(|v| v.found),
            Err(PinFound::Other("a2".into()))
        );
        // Every request of a multi-request statement is checked.
        let two = [
            request("GET", &[("project", given(&["dev"]))]),
            request("GET", &[("project", given(&["prod"]))]),
        ];
        assert!(check_pins(&two, &pins).is_err());
        // No pins: nothing to refuse.
        assert_eq!(
            check_pins(
                &[request("GET", &[("project", Omitted)])],
                &TenantRules::default()
            ),
            Ok(())
        );
    }

    #[test]
    fn violations_name_the_parameter_the_values_and_the_method() {
        let violation = PinViolation {
            parameter: "project".into(),
            allowed: vec!["sandbox".into(), "dev".into()],
            method: "google.compute.instances.list".into(),
            found: PinFound::Other("prod".into()),
        };
        assert_eq!(
            violation.to_string(),
            "parameter 'project' is pinned to 'sandbox', 'dev' for this tenant (tenants[].pinned_parameters); the statement gives it 'prod' in google.compute.instances.list; nothing was sent"
        );
        let omitted = PinViolation {
            found: PinFound::Omitted,
            ..violation
        };
        assert!(
            omitted
                .to_string()
                .contains("would run with its default: give project = 'sandbox'"),
            "{omitted}"
        );
    }
}
