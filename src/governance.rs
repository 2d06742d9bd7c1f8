//! A tenant's rules on what a statement sends upstream, as pure functions over the requests
//! the engine plans for it ([`PlannedRequest`]): the effect of each request (the engine's
//! answer, which `tenants[].read_methods` and `tenants[].not_read_methods` override), the
//! class a statement takes from the strongest effect of its requests, and which parameters
//! may only take given values (`tenants[].pinned_parameters`). No I/O and no logging here:
//! the tool-call pipeline asks the engine for the requests and the gate applies these.

use std::collections::BTreeMap;
use std::fmt;

use crate::engine::{Effect, EffectSource, MethodEffect, ParamValues, PlannedRequest};
use crate::policy::QueryClass;

/// A tenant's rules on the requests of its statements.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TenantRules {
    /// Methods whose requests are reads whatever the engine says of them.
    pub read_methods: Vec<MethodPattern>,
    /// Methods whose requests are never reads whatever the engine says of them (wins over
    /// `read_methods` when both name a method).
    pub not_read_methods: Vec<MethodPattern>,
    /// Parameters whose values are fixed: the name as configured, and the values allowed.
    pub pinned_parameters: BTreeMap<String, Vec<String>>,
}

impl TenantRules {
    /// Whether some parameter is pinned.
    pub fn has_pins(&self) -> bool {
        !self.pinned_parameters.is_empty()
    }

    /// What `request` does for this tenant: `not_read_methods` first (not a read), then
    /// `read_methods` (a read), else the engine's effect with its evidence.
    pub fn effect(&self, request: &PlannedRequest) -> MethodEffect {
        if let Some(pattern) = self.not_read_methods.iter().find(|p| p.matches(request)) {
            let effect = if request.effect.is_read() {
                Effect::Other
            } else {
                request.effect.effect
            };
            return MethodEffect::new(
                effect,
                EffectSource::TenantNotReadMethods,
                format!("tenants[].not_read_methods names it ({pattern})"),
            );
        }
        if let Some(pattern) = self.read_methods.iter().find(|p| p.matches(request)) {
            return MethodEffect::new(
                Effect::Read,
                EffectSource::TenantReadMethods,
                format!("tenants[].read_methods names it ({pattern})"),
            );
        }
        request.effect.clone()
    }

    /// Whether `request` counts as a read for this tenant (see [`TenantRules::effect`]).
    pub fn is_read(&self, request: &PlannedRequest) -> bool {
        if self.read_methods.is_empty() && self.not_read_methods.is_empty() {
            return request.is_read();
        }
        self.effect(request).is_read()
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

/// The class of a statement written as `class` whose requests are `requests`: the class of
/// the strongest effect of its requests (`read` → `select`, `write` → `mutation_create`,
/// `delete` → `mutation_delete`, `other` → `lifecycle`), whatever its SQL verb, and for an
/// INSERT, UPDATE, REPLACE or DELETE never less than the class written. A SELECT that runs a
/// method that is not a read is no longer a `select`; an EXEC of an HTTP DELETE method is a
/// `mutation_delete`; an EXEC whose requests only read is a `select`. Unknown statements
/// and statements that plan no request keep their class.
pub fn bound_class(
    class: QueryClass,
    requests: &[PlannedRequest],
    rules: &TenantRules,
) -> QueryClass {
    let Some(strongest) = requests.iter().map(|r| rules.effect(r).effect).max() else {
        return class;
    };
    let of_effect = match strongest {
        Effect::Read => QueryClass::Select,
        Effect::Write => QueryClass::MutationCreate,
        Effect::Delete => QueryClass::MutationDelete,
        Effect::Other => QueryClass::Lifecycle,
    };
    match class {
        QueryClass::Select | QueryClass::Lifecycle => of_effect,
        QueryClass::MutationCreate | QueryClass::MutationDelete => class.max(of_effect),
        QueryClass::Unknown => QueryClass::Unknown,
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
        with_effect(http, http_effect(http), params)
    }

    /// What the engine says of a method known only by its HTTP method.
    fn http_effect(http: &str) -> Effect {
        match http {
            "GET" | "HEAD" => Effect::Read,
            "DELETE" => Effect::Delete,
            _ => Effect::Other,
        }
    }

    fn with_effect(http: &str, effect: Effect, params: &[(&str, ParamValues)]) -> PlannedRequest {
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
            effect: MethodEffect::new(effect, EffectSource::Unknown, "test"),
        }
    }

    fn rules(read: &[&str], pins: &[(&str, &[&str])]) -> TenantRules {
        rules_both(read, &[], pins)
    }

    fn rules_both(read: &[&str], not_read: &[&str], pins: &[(&str, &[&str])]) -> TenantRules {
        let patterns = |list: &[&str]| {
            list.iter()
                .map(|p| MethodPattern::parse(p).unwrap())
                .collect()
        };
        TenantRules {
            read_methods: patterns(read),
            not_read_methods: patterns(not_read),
            pinned_parameters: pins
                .iter()
                .map(|(n, v)| ((*n).to_owned(), v.iter().map(|s| (*s).to_owned()).collect()))
                .collect(),
        }
    }

    /// The class a statement written as each class takes when its strongest request has
    /// each effect, written out: rows are the class written (`select`, `mutation_create`,
    /// `mutation_delete`, `lifecycle`, `unknown`), columns the effect (read, write, delete,
    /// other).
    fn expected(class: QueryClass, effect: Effect) -> QueryClass {
        use QueryClass::*;
        let table: [[QueryClass; 4]; 5] = [
            [Select, MutationCreate, MutationDelete, Lifecycle],
            [MutationCreate, MutationCreate, MutationDelete, Lifecycle],
            [MutationDelete, MutationDelete, MutationDelete, Lifecycle],
            [Select, MutationCreate, MutationDelete, Lifecycle],
            [Unknown, Unknown, Unknown, Unknown],
        ];
        let row = QueryClass::ALL.iter().position(|c| *c == class).unwrap();
        let column = [Effect::Read, Effect::Write, Effect::Delete, Effect::Other]
            .iter()
            .position(|e| *e == effect)
            .unwrap();
        table[row][column]
    }

    #[test]
    fn every_effect_class_and_override_gives_the_strongest_effects_class() {
        let named = rules(&["cloud.d1.database.query"], &[]);
        let wildcard = rules(&["cloud.*.*.*"], &[]);
        let other = rules(&["cloud.d1.database.list"], &[]);
        let not_read = rules_both(&[], &["cloud.d1.*.*"], &[]);
        // not_read_methods wins when both name the method.
        let both = rules_both(&["cloud.*.*.*"], &["cloud.d1.database.query"], &[]);
        let none = TenantRules::default();
        let effects = [Effect::Read, Effect::Write, Effect::Delete, Effect::Other];
        for effect in effects {
            let requests = [with_effect("POST", effect, &[])];
            for class in QueryClass::ALL {
                for (rules, tenant) in [
                    (&named, Some(Effect::Read)),
                    (&wildcard, Some(Effect::Read)),
                    (&other, None),
                    (&none, None),
                    (
                        &not_read,
                        Some(if effect == Effect::Read {
                            Effect::Other
                        } else {
                            effect
                        }),
                    ),
                    (
                        &both,
                        Some(if effect == Effect::Read {
                            Effect::Other
                        } else {
                            effect
                        }),
                    ),
                ] {
                    let decided = tenant.unwrap_or(effect);
                    assert_eq!(rules.effect(&requests[0]).effect, decided);
                    assert_eq!(rules.is_read(&requests[0]), decided == Effect::Read);
                    assert_eq!(
                        bound_class(class, &requests, rules),
                        expected(class, decided),
                        "{effect} × {class} × {rules:?}",
                    );
                }
            }
        }
        // The strongest request decides; no request at all keeps the class written.
        let mixed = [request("GET", &[]), request("POST", &[])];
        assert_eq!(
            bound_class(QueryClass::Select, &mixed, &none),
            QueryClass::Lifecycle
        );
        let exec_delete = [request("GET", &[]), request("DELETE", &[])];
        assert_eq!(
            bound_class(QueryClass::Lifecycle, &exec_delete, &none),
            QueryClass::MutationDelete
        );
        for class in QueryClass::ALL {
            assert_eq!(bound_class(class, &[], &none), class);
        }
        // The evidence names the tenant's setting.
        assert!(
            named
                .effect(&requests_of("POST"))
                .evidence
                .contains("read_methods"),
            "{:?}",
            named.effect(&requests_of("POST"))
        );
        assert!(
            not_read
                .effect(&requests_of("GET"))
                .evidence
                .contains("not_read_methods")
        );
    }

    fn requests_of(http: &str) -> PlannedRequest {
        request(http, &[])
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
