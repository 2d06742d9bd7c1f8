//! A count of slots handed out by rank: a freed slot goes to the waiter of the lowest rank
//! (first come among equals). Admission ranks every call by the order it was admitted in,
//! so a statement already under way gets the next free slot before one that started later:
//! statements finish in about the order they started, and the memory of those under way
//! does not pile up while newer ones take turns with them.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;

/// The slots.
#[derive(Debug)]
pub(crate) struct RankedSlots {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// Slots nobody holds (only while nobody waits).
    free: usize,
    waiting: BinaryHeap<Waiter>,
    /// Order of arrival, for waiters of the same rank.
    arrivals: u64,
}

/// A waiter; the heap's greatest is the one served first.
#[derive(Debug)]
struct Waiter {
    rank: u64,
    arrival: u64,
    wake: oneshot::Sender<RankedSlot>,
}

impl Waiter {
    fn key(&self) -> (u64, u64) {
        (self.rank, self.arrival)
    }
}

impl PartialEq for Waiter {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Waiter {}

impl PartialOrd for Waiter {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Waiter {
    fn cmp(&self, other: &Self) -> Ordering {
        // The lowest rank, then the earliest arrival, is the greatest.
        other.key().cmp(&self.key())
    }
}

/// One slot, given back when dropped.
#[derive(Debug)]
pub(crate) struct RankedSlot {
    /// `None` once given back (or handed on to a waiter).
    slots: Option<Arc<RankedSlots>>,
}

impl Drop for RankedSlot {
    fn drop(&mut self) {
        if let Some(slots) = self.slots.take() {
            slots.release();
        }
    }
}

impl RankedSlots {
    /// `count` slots.
    pub(crate) fn new(count: usize) -> Arc<Self> {
        Arc::new(RankedSlots {
            state: Mutex::new(State {
                free: count,
                waiting: BinaryHeap::new(),
                arrivals: 0,
            }),
        })
    }

    /// Waits for a slot: at once when one is free, else when one is freed and no waiter of
    /// a lower rank (or of the same rank, come earlier) is still waiting. Dropping the
    /// future gives up the place.
    pub(crate) async fn acquire(self: &Arc<Self>, rank: u64) -> RankedSlot {
        let woken = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            if state.free > 0 {
                state.free -= 1;
                return RankedSlot {
                    slots: Some(self.clone()),
                };
            }
            let (wake, woken) = oneshot::channel();
            let arrival = state.arrivals;
            state.arrivals += 1;
            state.waiting.push(Waiter {
                rank,
                arrival,
                wake,
            });
            woken
        };
        match woken.await {
            Ok(slot) => slot,
            // A waiter's sender is only dropped when it is handed a slot: never here.
            Err(_) => std::future::pending().await,
        }
    }

    /// Hands a freed slot to the first waiter still waiting, or keeps it free.
    fn release(self: &Arc<Self>) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        while let Some(waiter) = state.waiting.pop() {
            let slot = RankedSlot {
                slots: Some(self.clone()),
            };
            match waiter.wake.send(slot) {
                Ok(()) => return,
                // That waiter gave up: the slot goes to the next, without being given back
                // (which would take the lock held here).
                Err(mut slot) => slot.slots = None,
            }
        }
        state.free += 1;
    }

    /// Waiters in line (some may have given up).
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .waiting
            .len()
    }

    /// Slots nobody holds.
    #[cfg(test)]
    pub(crate) fn available(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .free
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_freed_slot_goes_to_the_lowest_rank_then_the_first_come() {
        let slots = RankedSlots::new(1);
        let held = slots.acquire(5).await;
        let (tx, mut order) = tokio::sync::mpsc::unbounded_channel();
        let mut waiters = Vec::new();
        for (rank, name) in [(9, "late"), (2, "early"), (9, "later"), (1, "earliest")] {
            let (waiting, tx) = (slots.clone(), tx.clone());
            waiters.push(tokio::spawn(async move {
                let slot = waiting.acquire(rank).await;
                tx.send(name).unwrap();
                drop(slot);
            }));
            // Each waiter is queued before the next is spawned.
            while slots.waiting() < waiters.len() {
                tokio::task::yield_now().await;
            }
        }
        drop(held);
        for waiter in waiters {
            waiter.await.unwrap();
        }
        let mut seen = Vec::new();
        while let Ok(name) = order.try_recv() {
            seen.push(name);
        }
        assert_eq!(seen, ["earliest", "early", "late", "later"]);
        assert_eq!(slots.available(), 1);
    }

    #[tokio::test]
    async fn a_waiter_that_gave_up_is_passed_over() {
        let slots = RankedSlots::new(1);
        let held = slots.acquire(0).await;
        let gave_up = {
            let slots = slots.clone();
            tokio::spawn(async move { slots.acquire(0).await })
        };
        while slots.waiting() == 0 {
            tokio::task::yield_now().await;
        }
        gave_up.abort();
        assert!(gave_up.await.unwrap_err().is_cancelled());
        let next = {
            let slots = slots.clone();
            tokio::spawn(async move { slots.acquire(7).await })
        };
        while slots.waiting() < 2 {
            tokio::task::yield_now().await;
        }
        drop(held);
        let slot = next.await.unwrap();
        assert_eq!(slots.available(), 0);
        drop(slot);
        assert_eq!(slots.available(), 1);
    }
}
