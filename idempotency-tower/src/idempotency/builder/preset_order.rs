//! Presets keep the settings made on the builder, in either order: every preset × setting
//! pair gives the same layer both ways, and the setting is in effect.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Response};
use idempotency_core::{InFlightPolicy, MemoryStore};

use super::IdempotencyLayerBuilder;
use crate::IdempotencyLayer;
use crate::callback::ConflictAnswer;
use crate::policy::StoragePolicy;
use crate::refusal::{Refusal, RefusalKind, RenderRefusal};

type Builder = IdempotencyLayerBuilder<MemoryStore>;

/// A named change to a builder (a setting, or a preset).
type Step = (&'static str, fn(Builder) -> Builder);

/// A renderer no preset uses.
struct Teapot;

impl RenderRefusal for Teapot {
    fn render(&self, _refusal: &Refusal) -> Response<Bytes> {
        let mut response = Response::new(Bytes::new());
        response
            .headers_mut()
            .insert("content-type", HeaderValue::from_static("text/x-teapot"));
        response
    }
}

/// Everything a builder is configured with, as text.
fn described(builder: &Builder) -> String {
    let rendered = builder
        .settings
        .renderer
        .render(&Refusal::new(RefusalKind::MissingKey, "x"));
    format!(
        "{:?} renderer={:?}",
        builder.settings,
        rendered.headers().get("content-type")
    )
}

fn settings() -> Vec<Step> {
    vec![
        ("namespace", |b| b.namespace("x")),
        ("key_header", |b| {
            b.key_header(HeaderName::from_static("x-request-key"))
        }),
        ("methods", |b| b.methods([Method::PUT])),
        ("fingerprint", |b| {
            b.fingerprint_headers([HeaderName::from_static("x-amount")])
        }),
        ("in_flight", |b| b.in_flight(InFlightPolicy::Reject)),
        ("wait_in_flight", |b| {
            b.wait_in_flight(Duration::from_secs(7))
        }),
        ("storage_policy", |b| {
            b.storage_policy(StoragePolicy::IncludeServerErrors)
        }),
        ("on_conflict reject", |b| {
            b.on_conflict(ConflictAnswer::Reject)
        }),
        ("on_conflict replay", |b| {
            b.on_conflict(ConflictAnswer::ReplayStored)
        }),
        ("refusals", |b| b.refusals(Teapot)),
    ]
}

fn presets() -> Vec<Step> {
    vec![
        ("callback", |b| b.callback("/trade_no")),
        #[cfg(feature = "grpc")]
        ("grpc", |b| b.grpc()),
    ]
}

#[test]
fn every_preset_keeps_every_setting_in_either_order() {
    let fresh = || IdempotencyLayer::builder(MemoryStore::new());
    for (preset_name, preset) in presets() {
        let preset_alone = described(&preset(fresh()));
        for (setting_name, setting) in settings() {
            // The callback's key is its own argument: the later of the two names the key.
            if preset_name == "callback" && setting_name == "key_header" {
                continue;
            }
            let preset_first = described(&setting(preset(fresh())));
            let setting_first = described(&preset(setting(fresh())));
            assert_eq!(
                setting_first, preset_first,
                "{setting_name} then {preset_name} differs from {preset_name} then {setting_name}"
            );
            // In effect: the layer differs from the preset's, unless the setting is the
            // preset's own value.
            let the_presets_own_value = matches!(
                (preset_name, setting_name),
                ("callback", "on_conflict replay") | ("grpc", "on_conflict reject")
            );
            assert_eq!(
                preset_first == preset_alone,
                the_presets_own_value,
                "{setting_name} after {preset_name}"
            );
        }
    }
}

#[test]
fn a_callback_key_given_after_a_key_setting_names_the_key() {
    let b = IdempotencyLayer::builder(MemoryStore::new())
        .key_header(HeaderName::from_static("x-request-key"))
        .callback("/trade_no");
    assert!(described(&b).contains("JsonPointer(\"/trade_no\")"));
}
