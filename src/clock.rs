//! The time read by the components whose behaviour is a duration: the JWKS refetch floor and
//! key-set age, the per-tenant request rate, the lifetime of approvals, the result cache's
//! TTL and the reuse of `/readyz` results. The server reads the system clock; a test hands
//! the composition root ([`crate::app::AppBuilder::clock`]) a [`TestClock`] and steps past
//! a duration with [`TestClock::advance`] instead of sleeping through it.
//!
//! The monotonic reading is tokio's [`Instant`], so a component tested on its own under
//! paused time (`#[tokio::test(start_paused = true)]`) follows `tokio::time::advance`.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

/// Where the current time comes from.
pub trait TimeSource: Send + Sync + fmt::Debug {
    /// The wall-clock time, for what is stamped into state other processes read (the expiry
    /// sealed into an approval).
    fn now(&self) -> SystemTime;
    /// The monotonic time, for intervals within the process.
    fn instant(&self) -> Instant;
}

/// A shared [`TimeSource`]: the system clock unless the composition root sets another.
#[derive(Clone, Debug)]
pub struct Clock(Arc<dyn TimeSource>);

impl Clock {
    /// The system clock (tokio's clock for the monotonic reading).
    pub fn system() -> Self {
        Clock(Arc::new(SystemClock))
    }

    /// The clock that reads `source`.
    pub fn from_source(source: Arc<dyn TimeSource>) -> Self {
        Clock(source)
    }

    /// The wall-clock time.
    pub fn now(&self) -> SystemTime {
        self.0.now()
    }

    /// The monotonic time.
    pub fn instant(&self) -> Instant {
        self.0.instant()
    }

    /// How long ago `earlier` was (zero when it is not in the past).
    pub fn since(&self, earlier: Instant) -> Duration {
        self.instant().saturating_duration_since(earlier)
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::system()
    }
}

/// The system clock.
#[derive(Debug)]
struct SystemClock;

impl TimeSource for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }

    fn instant(&self) -> Instant {
        Instant::now()
    }
}

/// The system clock moved ahead by what [`TestClock::advance`] added: time passes as usual,
/// and a test steps past a TTL, a floor or a refill at once. Both readings move together.
#[derive(Debug, Default)]
pub struct TestClock {
    ahead: Mutex<Duration>,
}

impl TestClock {
    /// A clock that reads the system clock until it is advanced.
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// Moves the clock `by` further ahead of the system clock.
    pub fn advance(&self, by: Duration) {
        let mut ahead = self.ahead.lock().unwrap_or_else(PoisonError::into_inner);
        *ahead = ahead.saturating_add(by);
    }

    /// How far ahead of the system clock it is.
    pub fn ahead(&self) -> Duration {
        *self.ahead.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// This clock as a [`Clock`] to hand to the composition root.
    pub fn clock(self: &Arc<Self>) -> Clock {
        Clock::from_source(self.clone())
    }
}

impl TimeSource for TestClock {
    fn now(&self) -> SystemTime {
        SystemTime::now() + self.ahead()
    }

    fn instant(&self) -> Instant {
        Instant::now() + self.ahead()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_clock_moves_both_readings_by_what_was_added() {
        let test = TestClock::new();
        let clock = test.clock();
        let (wall, mono) = (clock.now(), clock.instant());
        test.advance(Duration::from_secs(90));
        test.advance(Duration::from_secs(30));
        assert_eq!(test.ahead(), Duration::from_secs(120));
        let wall_moved = clock.now().duration_since(wall).unwrap();
        assert!(wall_moved >= Duration::from_secs(120), "{wall_moved:?}");
        assert!(clock.since(mono) >= Duration::from_secs(120));
        assert_eq!(
            clock.since(clock.instant() + Duration::from_secs(5)),
            Duration::ZERO
        );
    }
}
