//! Bounded waits for what a test expects to happen: a probe is asked every `step` until it
//! says yes, and the test fails, naming what it awaited and what it saw last, once `within`
//! has passed. Deadlines are on tokio's clock (virtual under paused time);
//! [`try_eventually_blocking`] is the same for plain threads.

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

/// What a probe answers: `true`, `Some(value)` or `Ok(value)` when the awaited thing has
/// happened; otherwise what was seen instead (for the failure message).
pub trait Probe {
    /// What the wait returns once it has happened.
    type Value;
    /// What was seen while it had not.
    type Pending: Debug;
    /// The answer as a result.
    fn into_result(self) -> Result<Self::Value, Self::Pending>;
}

impl Probe for bool {
    type Value = ();
    type Pending = &'static str;
    fn into_result(self) -> Result<(), &'static str> {
        if self { Ok(()) } else { Err("not yet") }
    }
}

impl<T> Probe for Option<T> {
    type Value = T;
    type Pending = &'static str;
    fn into_result(self) -> Result<T, &'static str> {
        self.ok_or("nothing yet")
    }
}

impl<T, E: Debug> Probe for Result<T, E> {
    type Value = T;
    type Pending = E;
    fn into_result(self) -> Result<T, E> {
        self
    }
}

/// Asks `probe` every `step` until it says yes, and returns its value; fails the test after
/// `within`, naming `what` was awaited and the probe's last answer.
pub async fn eventually<P, F, Fut>(
    what: &str,
    within: Duration,
    step: Duration,
    probe: F,
) -> P::Value
where
    P: Probe,
    F: FnMut() -> Fut,
    Fut: Future<Output = P>,
{
    match try_eventually(within, step, probe).await {
        Ok(value) => value,
        Err(last) => panic!("timed out after {within:?} waiting for {what}; last seen: {last:?}"),
    }
}

/// [`eventually`] without the failure: the probe's last answer once `within` has passed, for
/// waits whose end is not a failure (or whose caller asserts on the last answer).
pub async fn try_eventually<P, F, Fut>(
    within: Duration,
    step: Duration,
    mut probe: F,
) -> Result<P::Value, P::Pending>
where
    P: Probe,
    F: FnMut() -> Fut,
    Fut: Future<Output = P>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let last = match probe().await.into_result() {
            Ok(value) => return Ok(value),
            Err(last) => last,
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(last);
        }
        tokio::time::sleep(step).await;
    }
}

/// [`try_eventually`] on a plain thread (in `Drop`, in `spawn_blocking`): real time, and
/// the thread sleeps between asks.
pub fn try_eventually_blocking<P: Probe>(
    within: Duration,
    step: Duration,
    mut probe: impl FnMut() -> P,
) -> Result<P::Value, P::Pending> {
    let deadline = std::time::Instant::now() + within;
    loop {
        let last = match probe().into_result() {
            Ok(value) => return Ok(value),
            Err(last) => last,
        };
        if std::time::Instant::now() >= deadline {
            return Err(last);
        }
        std::thread::sleep(step);
    }
}

#[tokio::test]
async fn a_wait_returns_the_value_once_the_probe_says_yes() {
    let mut asked = 0;
    let value = eventually(
        "the third ask",
        Duration::from_secs(1),
        Duration::from_millis(10),
        || {
            asked += 1;
            let now = asked;
            async move { (now == 3).then_some(now) }
        },
    )
    .await;
    assert_eq!(value, 3);
}

#[tokio::test]
async fn a_wait_fails_naming_what_it_awaited_and_what_it_saw() {
    let started = tokio::time::Instant::now();
    let waited = tokio::spawn(eventually(
        "the moon",
        Duration::from_millis(100),
        Duration::from_millis(10),
        || async { Err::<(), _>("only stars") },
    ))
    .await;
    let message = *waited
        .unwrap_err()
        .into_panic()
        .downcast::<String>()
        .unwrap();
    assert!(message.contains("waiting for the moon"), "{message}");
    assert!(message.contains("only stars"), "{message}");
    assert!(started.elapsed() >= Duration::from_millis(100));
    let last = try_eventually(
        Duration::from_millis(50),
        Duration::from_millis(10),
        || async { false },
    )
    .await;
    assert_eq!(last, Err("not yet"));
}

#[test]
fn a_blocking_wait_gives_the_last_answer_at_its_deadline() {
    let mut asked = 0u32;
    let last = try_eventually_blocking(Duration::from_millis(30), Duration::from_millis(5), || {
        asked += 1;
        Err::<(), _>(asked)
    });
    assert!(matches!(last, Err(n) if n >= 2), "{last:?}");
    assert_eq!(
        try_eventually_blocking(Duration::ZERO, Duration::ZERO, || Some(7)),
        Ok(7)
    );
}
