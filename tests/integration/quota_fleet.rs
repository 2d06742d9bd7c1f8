//! Quotas held fleet-wide: three `querygate serve` replicas behind a real nginx (round
//! robin), counting in one PostgreSQL (`quota_windows`). A tenant sending three times its
//! read quota, spread over the replicas, gets `quota.exceeded` for the rest: the calls
//! admitted over the fleet never exceed the quota (leases cost under-admission only, at most
//! `replicas × (lease − 1)`); another tenant, without a quota, is served throughout. Also
//! prints the latency a PostgreSQL quota check adds per call (leased and not).

use std::time::{Duration, Instant};

use serde_json::json;
use sqlx_core::query_scalar::query_scalar;

use crate::mcp_support::install_crypto_provider;
use crate::mock::{Mock, Reply};
use crate::support::fleet::{Nginx, Replica, nginx_binary};
use crate::support::gate::SELECT;
use crate::support::identity::{ISSUER, RESOURCE, SigningKey, claims};
use crate::support::ports::restartable_port;
use crate::support::quota_calls::{call_sql, code_of};
use crate::support::required;
use crate::support::{SECRET, fixture_registry, pg};

/// The quota of `acme`'s reads, per hour (an hour: the test never sees a second window
/// unless it runs across the top of an hour, which it checks).
const QUOTA: u64 = 30;

async fn spawn(
    dir: &std::path::Path,
    mock: &Mock,
    pem: &std::path::Path,
    database_url: &str,
    nginx_port: u16,
    port: u16,
    name: &str,
) -> Replica {
    let acme = dir.join("acme.env");
    let globex = dir.join("globex.env");
    std::fs::write(&acme, format!("TESTAPI_KEY={SECRET}\n")).unwrap();
    std::fs::write(&globex, format!("TESTAPI_KEY={SECRET}\n")).unwrap();
    let yaml = format!(
        "registry:\n  root: {root}\nproviders:\n  testapi:\n    base_url: {mock}\n\
credentials:\n  process_env: false\n\
tenants:\n  - id: default\n  - id: acme\n    credentials:\n      env_file: {acme}\n    quotas:\n      read: {QUOTA}/hour\n  - id: globex\n    credentials:\n      env_file: {globex}\n\
server:\n  listen: 127.0.0.1:{port}\n  allowed_hosts: ['127.0.0.1:{nginx_port}', '127.0.0.1:{port}']\n\
auth:\n  resource: {RESOURCE}\n  authorization_servers: [{ISSUER}]\n  jwt:\n    issuers:\n      - issuer: {ISSUER}\n        public_keys: [{pem}]\n        algorithms: [ES256]\n        tenants: [default, acme, globex]\n\
database:\n  url: {database_url}\n",
        root = fixture_registry().display(),
        mock = mock.url(),
        acme = acme.display(),
        globex = globex.display(),
        pem = pem.display(),
    );
    let config = dir.join(format!("{name}.yaml"));
    std::fs::write(&config, yaml).unwrap();
    Replica::spawn(&config, port, name).await
}

fn hour_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 3600
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

#[tokio::test]
async fn a_tenant_at_three_times_its_quota_is_held_to_it_across_three_replicas() {
    let Some(nginx_binary) = nginx_binary() else {
        assert!(
            !required(),
            "nginx is not installed: under CI the fleet quota test must run"
        );
        eprintln!("note: nginx not found; skipping the fleet quota test");
        return;
    };
    let Some(database) = pg::fresh_database().await else {
        return;
    };
    let pool = database.pool(2).await;
    querygate::db::migrate(&pool).await.unwrap();
    install_crypto_provider();
    let mock = Mock::start().await;
    mock.route("/orgs/acme/items", Reply::json(json!([{"id": 1}])));
    let dir = tempfile::tempdir().unwrap();
    let key = SigningKey::new("k1");
    let pem = dir.path().join("issuer.pem");
    std::fs::write(&pem, key.public_pem()).unwrap();
    let nginx_port = restartable_port();
    let ports: Vec<u16> = (0..3).map(|_| restartable_port()).collect();
    let mut replicas = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        replicas.push(
            spawn(
                dir.path(),
                &mock,
                &pem,
                &database.url,
                nginx_port,
                *port,
                &format!("q{i}"),
            )
            .await,
        );
    }
    let nginx = Nginx::start(nginx_binary, nginx_port, ports.clone()).await;
    let url = nginx.url();
    let acme = key.sign(&claims("acme"));
    let globex = key.sign(&claims("globex"));
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();

    // The other tenant, unloaded: its latency through nginx.
    let mut unloaded = Vec::new();
    for _ in 0..30 {
        let started = Instant::now();
        let reply = call_sql(&http, &url, &globex, "run_select_query", SELECT).await;
        unloaded.push(started.elapsed());
        assert_eq!(code_of(&reply), "", "{reply}");
    }

    let hour = hour_now();
    // Three times the quota from six clients at once, while the other tenant keeps calling.
    let sent = 3 * QUOTA as usize;
    let workers = 6;
    let mut floods = Vec::new();
    for _ in 0..workers {
        let (http, url, token) = (http.clone(), url.clone(), acme.clone());
        floods.push(tokio::spawn(async move {
            let mut codes = Vec::new();
            for _ in 0..sent / workers {
                let reply = call_sql(&http, &url, &token, "run_select_query", SELECT).await;
                codes.push(code_of(&reply).to_owned());
            }
            codes
        }));
    }
    let other = {
        let (http, url, token) = (http.clone(), url.clone(), globex.clone());
        tokio::spawn(async move {
            let mut loaded = Vec::new();
            for _ in 0..30 {
                let started = Instant::now();
                let reply = call_sql(&http, &url, &token, "run_select_query", SELECT).await;
                loaded.push(started.elapsed());
                assert_eq!(code_of(&reply), "", "{reply}");
            }
            loaded
        })
    };
    let mut codes = Vec::new();
    for flood in floods {
        codes.extend(flood.await.unwrap());
    }
    let mut loaded = other.await.unwrap();
    let admitted = codes.iter().filter(|c| c.is_empty()).count() as u64;
    let refused = codes.iter().filter(|c| *c == "quota.exceeded").count() as u64;
    assert_eq!(
        admitted + refused,
        sent as u64,
        "every call admitted or refused by its quota: {codes:?}"
    );
    let windows = if hour_now() == hour { 1 } else { 2 };
    assert!(
        admitted <= QUOTA * windows,
        "{admitted} admitted over the fleet, more than the quota {QUOTA} ({windows} window(s))"
    );
    // Leases of 3 (a tenth of 30): at most 3 × 2 calls leased by a replica and not used.
    assert!(
        admitted >= QUOTA - 3 * 2,
        "{admitted} admitted: more under-admission than the leases allow"
    );
    assert_eq!(mock.count("/orgs/acme/items") as u64, admitted + 30 + 30);
    // The shared counter: what the replicas leased, never less than what they admitted.
    let used: i64 = query_scalar(
        "SELECT coalesce(sum(used), 0)::bigint FROM quota_windows WHERE key = 'acme/read'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(
        used as u64 >= admitted,
        "{used} leased, {admitted} admitted"
    );

    unloaded.sort();
    loaded.sort();
    eprintln!(
        "fleet quota: acme sent {sent}, admitted {admitted}, refused {refused} (quota {QUOTA}/hour, 3 replicas, lease 3); \
globex p50/p99 unloaded {:?}/{:?}, while acme floods {:?}/{:?}",
        percentile(&unloaded, 0.5),
        percentile(&unloaded, 0.99),
        percentile(&loaded, 0.5),
        percentile(&loaded, 0.99),
    );
    drop(nginx);
    for replica in replicas {
        drop(replica);
    }
}

/// The latency one PostgreSQL quota check adds: `Quotas::admit` in a loop against the test
/// cluster, with a lease of 1 (a round trip every call) and of 10 (one in ten), printed.
#[tokio::test]
async fn the_postgres_quota_check_costs_one_round_trip_per_lease() {
    let Some(database) = pg::fresh_database().await else {
        return;
    };
    let pool = database.pool(4).await;
    querygate::db::migrate(&pool).await.unwrap();
    let config = querygate::config::Config::load(&querygate::config::Sources {
        file: None,
        env: Default::default(),
    })
    .unwrap();
    let mut tenants = config.tenants.clone();
    tenants[0].quotas.tenant.read = Some(querygate::config::Quota {
        limit: 1_000_000,
        window: Duration::from_secs(3600),
    });
    let principal = querygate::auth::Principal::anonymous();
    for lease in [1, 10] {
        let quotas = querygate::quota::Quotas::postgres(
            querygate::config::QuotaConfig {
                store: querygate::config::QuotaStoreKind::Postgres,
                lease,
                on_store_failure: querygate::config::StoreFailure::Closed,
            },
            &tenants,
            pool.clone(),
        );
        // Warm the pool's connection.
        for _ in 0..20 {
            let verdict = quotas
                .admit(&principal, querygate::config::QuotaClass::Read)
                .await;
            assert_eq!(verdict, querygate::quota::Verdict::Admitted);
        }
        let mut took = Vec::new();
        for _ in 0..500 {
            let started = Instant::now();
            let verdict = quotas
                .admit(&principal, querygate::config::QuotaClass::Read)
                .await;
            took.push(started.elapsed());
            assert_eq!(verdict, querygate::quota::Verdict::Admitted);
        }
        took.sort();
        let mean = took.iter().sum::<Duration>() / took.len() as u32;
        eprintln!(
            "postgres quota check, lease {lease}: mean {mean:?}, p50 {:?}, p99 {:?}, max {:?} (500 calls)",
            percentile(&took, 0.5),
            percentile(&took, 0.99),
            took[took.len() - 1],
        );
    }
}
