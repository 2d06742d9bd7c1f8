//! Evaluation slots: what a statement holds while it does local work beside the async
//! runtime, so that whoever runs the engine can bound the CPU and memory of that work. A
//! statement asks for a slot before each such piece of work and gives it back when the
//! piece is done: planning it (documents are read and models built on a blocking thread
//! when not cached), reading the documents of SHOW and DESCRIBE, and each command of its
//! SQLite work once that runs on a thread of its own (decoding a response page into
//! SQLite, running SQL; see `eval`). It holds none while it waits for an upstream API, and
//! none for the small SQLite work done on the async threads, which their number bounds.
//!
//! A statement that loads more than `EvalLimits::INLINE_BYTES` of response pages into its
//! database (its SQLite work then moves to a thread of its own) also holds a bulk permit,
//! from the page that takes it past them until its SQLite work has ended: its data and its
//! thread's memory stay all that time, waits for upstream pages included, so the number of
//! permits bounds the memory of large statements. It is asked for holding no slot, so slot
//! holders never wait for a permit holder.
//!

use std::fmt;
use std::future::Future;
use std::pin::Pin;
/// Hands out evaluation slots (see the module docs); the engine's caller decides how many
/// there are and who waits for them.
pub trait EvalSlots: Send + Sync + fmt::Debug {
    /// Waits for a slot; it is held until the returned [`EvalSlot`] is dropped. The future
    /// is also awaited off the async runtime (blocking a statement's SQLite thread), so it
    /// must not need one.
    fn acquire(&self) -> Pin<Box<dyn Future<Output = EvalSlot> + Send + '_>>;

    /// Waits for a bulk permit (see the module docs); it is held until the returned
    /// [`EvalSlot`] is dropped. Awaited on the async runtime, holding no slot.
    fn acquire_bulk(&self) -> Pin<Box<dyn Future<Output = EvalSlot> + Send + '_>>;
}

/// A slot held for one piece of local work; dropping it frees the slot.
pub struct EvalSlot(#[allow(dead_code)] Box<dyn Send + Sync>);

impl EvalSlot {
    /// A slot that frees `held` (e.g. semaphore permits) when it is dropped.
    pub fn new(held: impl Send + Sync + 'static) -> Self {
        EvalSlot(Box::new(held))
    }
}

impl fmt::Debug for EvalSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EvalSlot")
    }
}
