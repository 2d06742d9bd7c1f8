//! Cedar gate benchmark: `cargo bench --bench policy`.
//!
//! The latency the gate adds to a call of a tenant with 100 Cedar policies: building the
//! principal, action, resource and context and asking the policies (`querygate::cedar::
//! decide`, as the gate does for every statement), for a statement of one request, the
//! same from a subject a forbid names (denied), and for a join of three. The policies mix permits and forbids over providers, groups, verbs and
//! parameter tags, as a tenant's would. Prints p50, p90, p99 and the maximum over
//! 20,000 calls after 2,000 to warm up (target: p99 under 50 µs).
//!
//! `QUERYGATE_BENCH_CALLS=N` measures N calls (after N/10) instead, for counting
//! instructions under callgrind, e.g.
//! `QUERYGATE_BENCH_CALLS=1000 valgrind --tool=callgrind --collect-atstart=no
//! --toggle-collect='querygate::cedar::decide*' --dump-before='policy::print*' BENCH_BINARY`:
//! the dumps hold, in order, the calls of the one-request statement, of the forbidden
//! subject's and of the join.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use querygate::auth::Principal;
use querygate::cedar::{LoadedPolicies, Question, decide, parse_sources};
use querygate::engine::{ParamValues, PlannedParam, PlannedRequest};
use querygate::governance::TenantRules;
use querygate::policy::{Mode, QueryClass};

const POLICIES: usize = 100;
const CALLS: usize = 20_000;

/// 100 policies: for each of 25 providers, a read permit, a group-gated write permit, a
/// forbid outside a project, and a forbid for a subject.
fn policies() -> Result<LoadedPolicies> {
    let mut text = String::new();
    for i in 0..POLICIES / 4 {
        let provider = if i == 0 {
            "google".to_owned()
        } else {
            format!("p{i}")
        };
        text.push_str(&format!(
            r#"
@id("reads-{i}")
permit(principal, action in Querygate::Action::"read", resource)
when {{ resource.provider == "{provider}" && context.row_cap <= 10000 }};

@id("writes-{i}")
permit(principal in Querygate::Group::"jwt:https://idp.example#ops-{i}", action in Querygate::Action::"write", resource)
when {{ resource.provider == "{provider}" && resource.verb != "EXEC" }};

@id("sandbox-{i}")
forbid(principal, action == Querygate::Action::"mutation_delete", resource)
when {{ resource.provider == "{provider}" }}
unless {{ resource.hasTag("project") && ["sandbox", "dev-{i}"].containsAll(resource.getTag("project")) }};

@id("subject-{i}")
forbid(principal, action, resource) when {{ principal.subject == "blocked-{i}" && principal.issuer != "" }};
"#
        ));
    }
    match parse_sources(vec![(PathBuf::from("bench.cedar"), text)]) {
        Ok(loaded) if loaded.len() == POLICIES => Ok(loaded),
        Ok(loaded) => bail!("{} policies, expected {POLICIES}", loaded.len()),
        Err(problems) => bail!("{problems:?}"),
    }
}

fn request(resource: &str, method: &str, http: &str) -> PlannedRequest {
    let given = |v: &str| ParamValues::Given(vec![v.to_owned()]);
    PlannedRequest {
        provider: "google".into(),
        service: "compute".into(),
        resource: resource.into(),
        method: method.into(),
        http_method: http.into(),
        effect: querygate::engine::MethodEffect::of_http_method(http),
        params: vec![
            PlannedParam {
                name: "project".into(),
                sql_name: None,
                values: given("sandbox"),
            },
            PlannedParam {
                name: "zone".into(),
                sql_name: None,
                values: given("us-east1-b"),
            },
            PlannedParam {
                name: "instance".into(),
                sql_name: None,
                values: given("vm1"),
            },
        ],
    }
}

/// How many calls to measure: `QUERYGATE_BENCH_CALLS`, else [`CALLS`].
fn calls() -> Result<usize> {
    match std::env::var("QUERYGATE_BENCH_CALLS") {
        Ok(n) => match n.parse()? {
            0 => bail!("QUERYGATE_BENCH_CALLS must be above 0"),
            n => Ok(n),
        },
        Err(_) => Ok(CALLS),
    }
}

/// The times of `calls()` calls after a tenth as many; each answer must be a denial when
/// `denied`, else allow the statement.
fn measure(
    policies: &LoadedPolicies,
    question: &Question<'_>,
    denied: bool,
) -> Result<Vec<Duration>> {
    let calls = calls()?;
    for _ in 0..calls / 10 {
        decide(policies, question).map_err(anyhow::Error::msg)?;
    }
    let mut times = Vec::with_capacity(calls);
    for _ in 0..calls {
        let start = Instant::now();
        let answer = decide(policies, question).map_err(anyhow::Error::msg)?;
        times.push(start.elapsed());
        if answer.denied().is_some() != denied {
            bail!("the benchmark's statement got an unexpected answer: {answer:?}");
        }
    }
    times.sort();
    Ok(times)
}

/// Not inlined: callgrind's `--dump-before` finds it.
#[inline(never)]
fn print(what: &str, times: &[Duration]) {
    let at = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)];
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "  {what:<40} p50 {:>6.1} µs  p90 {:>6.1} µs  p99 {:>6.1} µs  max {:>7.1} µs",
        us(at(0.50)),
        us(at(0.90)),
        us(at(0.99)),
        us(times[times.len() - 1])
    );
}

fn main() -> Result<()> {
    println!("querygate Cedar gate benchmark (cargo bench --bench policy)");
    let started = Instant::now();
    let policies = policies()?;
    let calls = calls()?;
    println!(
        "  {POLICIES} policies parsed and validated in {:.1} ms; {calls} calls each after {} to warm up",
        started.elapsed().as_secs_f64() * 1e3,
        calls / 10
    );
    let mut principal = Principal::local();
    principal.method = querygate::auth::Method::Jwt;
    principal.issuer = Some("https://idp.example".into());
    principal.subject = "olga".into();
    principal.groups = vec!["ops-0".into(), "staff".into(), "eu".into()];
    let rules = TenantRules::default();
    let one = [request("instances", "delete", "DELETE")];
    let question = Question {
        principal: &principal,
        tool: "run_mutation_query",
        mode: Mode::FullAccess,
        class: QueryClass::MutationDelete,
        sql_class: QueryClass::MutationDelete,
        verb: "DELETE",
        row_cap: 1000,
        requests: &one,
        rules: &rules,
    };
    print("DELETE, 1 request", &measure(&policies, &question, false)?);
    // A subject a forbid names (`subject-3`): denied.
    let mut blocked = principal.clone();
    blocked.subject = "blocked-3".into();
    blocked.issuer = Some("https://issuer.example".into());
    let denied = Question {
        principal: &blocked,
        ..question
    };
    print(
        "DELETE, 1 request, a forbidden subject",
        &measure(&policies, &denied, true)?,
    );
    let three = [
        request("instances", "list", "GET"),
        request("disks", "list", "GET"),
        request("networks", "list", "GET"),
    ];
    let question = Question {
        tool: "run_select_query",
        class: QueryClass::Select,
        sql_class: QueryClass::Select,
        verb: "SELECT",
        requests: &three,
        ..question
    };
    print(
        "SELECT join, 3 requests",
        &measure(&policies, &question, false)?,
    );
    Ok(())
}
