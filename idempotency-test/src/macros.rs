//! The macros that generate one test per conformance check.

/// Generates one `#[tokio::test]` per store check. `$make` is an `async` expression giving
/// `Option<Store>` (`None` skips; see [`unavailable`](crate::unavailable)).
#[macro_export]
macro_rules! store_conformance_tests {
    ($make:expr) => {
        $crate::store_conformance_tests!(@tests $make;
            lifecycle, mismatch, takeover_and_fencing, takeover_with_other_payload,
            touch_extends_lease, release_and_reclaim, unknown_key_is_refused,
            completed_expiry_and_purge, abandoned_lease_outlives_purge,
            model_walk, undo_spares_other_claims,
            conflict_marks, settle_pending_claims);
        $crate::store_conformance_tests!(@shared $make; keys_are_independent, claim_storm);
    };
    (@tests $make:expr; $($check:ident),*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $check() {
            if let Some(store) = $make.await {
                $crate::$check(&store).await;
            }
        }
    )*};
    (@shared $make:expr; $($check:ident),*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $check() {
            if let Some(store) = $make.await {
                $crate::$check(::std::sync::Arc::new(store)).await;
            }
        }
    )*};
}

/// Generates the checks of a store that keeps the checkpoints of runs with steps
/// ([`Store::checkpoint`](idempotency_core::Store::checkpoint)), beside
/// [`store_conformance_tests!`]. `$make` is as there.
#[macro_export]
macro_rules! checkpoint_conformance_tests {
    ($make:expr) => {
        $crate::store_conformance_tests!(@tests $make; checkpoints);
    };
}

/// Generates the token conformance test. `$make` is an `async` expression giving
/// `Option<TokenStore>`.
#[macro_export]
macro_rules! token_conformance_tests {
    ($make:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn one_time_tokens() {
            if let Some(tokens) = $make.await {
                $crate::tokens(::std::sync::Arc::new(tokens)).await;
            }
        }
    };
}
