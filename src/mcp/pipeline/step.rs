//! The one tower `Layer` and `Service` every pipeline step uses: a step says what it does
//! around the rest of the pipeline ([`Step::run`]); [`StepLayer`] and [`StepService`] do the
//! tower plumbing (readiness from the inner service, the ready service handed to the call
//! and a clone kept for the next one). A step holds only what it uses, behind one `Arc`: a
//! clone of the stack (one per call) costs one count per step.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tower::{Layer, Service};

use super::{Call, CallError, ToolReply};

/// The future of a step.
pub(super) type StepFuture = Pin<Box<dyn Future<Output = Result<ToolReply, CallError>> + Send>>;

/// One step of the pipeline around `next`, the steps after it.
pub(super) trait Step: Send + Sync + 'static {
    /// Runs `call` through this step, handing it to `next` when it goes on.
    fn run<S>(self: Arc<Self>, next: S, call: Call) -> StepFuture
    where
        S: Service<Call, Response = ToolReply, Error = CallError> + Send + 'static,
        S::Future: Send;
}

/// Puts a [`Step`] in front of a service.
pub(super) struct StepLayer<T>(pub(super) Arc<T>);

impl<T> StepLayer<T> {
    /// The layer of `step`.
    pub(super) fn new(step: T) -> Self {
        StepLayer(Arc::new(step))
    }
}

impl<T> Clone for StepLayer<T> {
    fn clone(&self) -> Self {
        StepLayer(self.0.clone())
    }
}

impl<T: Step, S> Layer<S> for StepLayer<T> {
    type Service = StepService<T, S>;

    fn layer(&self, inner: S) -> StepService<T, S> {
        StepService {
            step: self.0.clone(),
            inner,
        }
    }
}

/// A [`Step`] in front of `S`.
pub(super) struct StepService<T, S> {
    step: Arc<T>,
    inner: S,
}

impl<T, S: Clone> Clone for StepService<T, S> {
    fn clone(&self) -> Self {
        StepService {
            step: self.step.clone(),
            inner: self.inner.clone(),
        }
    }
}

impl<T, S> Service<Call> for StepService<T, S>
where
    T: Step,
    S: Service<Call, Response = ToolReply, Error = CallError> + Clone + Send + 'static,
    S::Future: Send,
{
    type Response = ToolReply;
    type Error = CallError;
    type Future = StepFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), CallError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, call: Call) -> StepFuture {
        // Keep the service that was polled ready; the clone waits for the next call.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        self.step.clone().run(inner, call)
    }
}
