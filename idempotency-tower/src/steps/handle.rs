//! The request's run, as a handler holds it: [`Steps`].

use std::sync::{Arc, Mutex, PoisonError};

use idempotency_steps::RunStore;

/// Where the request's run waits between the layer and its handler.
pub(crate) struct Slot<S: RunStore> {
    run: Mutex<(Option<S::Run>, bool)>,
}

impl<S: RunStore> Slot<S> {
    /// A slot holding `run`.
    pub(crate) fn new(run: S::Run) -> Arc<Self> {
        Arc::new(Self {
            run: Mutex::new((Some(run), false)),
        })
    }

    /// Takes the run back once the handler answered; `None` if the handler still holds it.
    pub(crate) fn reclaim(&self) -> Option<S::Run> {
        self.run
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .0
            .take()
    }
}

/// The request's run with steps, for the handler of a route behind a
/// [`StepsLayer`](super::StepsLayer): started, or resumed after its last checkpoint. It derefs
/// to the store's run: call its steps; the layer stores the answer (or leaves the run
/// resumable) when the handler answers.
///
/// `Steps<PostgresStore>` (or `MySqlStore`, `SqliteStore`) derefs to
/// [`idempotency_steps::Run`] (local and foreign steps); `Steps<Leased<RedisStore>>` (or any
/// core store in [`Leased`](idempotency_steps::leased::Leased)) to
/// [`idempotency_steps::leased::Run`] (foreign steps). In axum it is an extractor (feature
/// `axum`); in tonic, take it with [`Steps::from_extensions`].
pub struct Steps<S: RunStore> {
    /// `Some` until dropped.
    run: Option<S::Run>,
    slot: Arc<Slot<S>>,
}

impl<S: RunStore> std::fmt::Debug for Steps<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Steps").field("run", &self.run).finish()
    }
}

impl<S: RunStore> Steps<S> {
    /// Takes the request's run from its extensions, through a [`StepsHandle`].
    pub fn from_extensions(handle: Option<&StepsHandle<S>>) -> Result<Self, StepsUnavailable> {
        let handle = handle.ok_or(StepsUnavailable::NoRun)?;
        let mut state = handle.0.run.lock().unwrap_or_else(PoisonError::into_inner);
        match (state.0.take(), state.1) {
            (Some(run), false) => {
                state.1 = true;
                Ok(Self {
                    run: Some(run),
                    slot: Arc::clone(&handle.0),
                })
            }
            (run, _) => {
                state.0 = run;
                Err(StepsUnavailable::TakenTwice)
            }
        }
    }

    fn run(&self) -> &S::Run {
        match &self.run {
            Some(run) => run,
            None => unreachable!("Steps holds its run until dropped"),
        }
    }
}

impl<S: RunStore> std::ops::Deref for Steps<S> {
    type Target = S::Run;

    fn deref(&self) -> &S::Run {
        self.run()
    }
}

impl<S: RunStore> std::ops::DerefMut for Steps<S> {
    fn deref_mut(&mut self) -> &mut S::Run {
        match &mut self.run {
            Some(run) => run,
            None => unreachable!("Steps holds its run until dropped"),
        }
    }
}

impl<S: RunStore> Drop for Steps<S> {
    /// Gives the run back to the layer, which stores the answer or pauses it.
    fn drop(&mut self) {
        self.slot
            .run
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .0 = self.run.take();
    }
}

/// The request extension through which a handler takes the request's run ([`Steps`]).
pub struct StepsHandle<S: RunStore>(pub(crate) Arc<Slot<S>>);

impl<S: RunStore> Clone for StepsHandle<S> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<S: RunStore> std::fmt::Debug for StepsHandle<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StepsHandle")
    }
}

/// Why a handler got no run: a programming error in the service (500).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StepsUnavailable {
    /// The route is not behind a steps layer (or the request passed through unguarded).
    #[error("no run: the route is not behind a steps idempotency layer")]
    NoRun,
    /// The run was taken already (the handler asked twice).
    #[error("the request's run was taken already")]
    TakenTwice,
}

#[cfg(feature = "axum")]
mod axum_extract {
    use axum_core::extract::FromRequestParts;
    use axum_core::response::{IntoResponse, Response};
    use http::request::Parts;
    use idempotency_steps::RunStore;

    use super::{Steps, StepsHandle, StepsUnavailable};
    use crate::refusal::{ProblemJson, Refusal, RefusalKind, RenderRefusal};

    impl IntoResponse for StepsUnavailable {
        fn into_response(self) -> Response {
            let refusal = Refusal::new(RefusalKind::TransactionUnavailable, self.to_string());
            ProblemJson::new()
                .render(&refusal)
                .map(axum_core::body::Body::from)
        }
    }

    impl<T: Send + Sync, S: RunStore> FromRequestParts<T> for Steps<S> {
        type Rejection = StepsUnavailable;

        async fn from_request_parts(
            parts: &mut Parts,
            _state: &T,
        ) -> Result<Self, Self::Rejection> {
            Steps::from_extensions(parts.extensions.get::<StepsHandle<S>>())
        }
    }
}

#[cfg(feature = "tonic")]
impl From<StepsUnavailable> for tonic::Status {
    fn from(error: StepsUnavailable) -> Self {
        tonic::Status::internal(error.to_string())
    }
}
