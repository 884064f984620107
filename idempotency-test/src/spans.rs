//! [`SpanCapture`]: a `tracing` layer that keeps every span (name, target, attributes as
//! recorded) and every event, for tests of the documented span names
//! ([`telemetry`](idempotency_core::telemetry)) and of what they must never carry (a raw key).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// A span as a [`SpanCapture`] saw it: its attributes with their last recorded values.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CapturedSpan {
    /// The span's name.
    pub name: String,
    /// The span's target.
    pub target: String,
    /// The attributes recorded, by name (text values unquoted, others as `Debug`).
    pub fields: BTreeMap<String, String>,
}

impl CapturedSpan {
    /// The value of attribute `name`, if recorded.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

#[derive(Default)]
struct Kept {
    spans: Vec<CapturedSpan>,
    open: HashMap<u64, usize>,
    events: Vec<String>,
}

/// A layer that keeps spans and events: `tracing_subscriber::registry().with(capture.clone())`.
#[derive(Clone, Default)]
pub struct SpanCapture(Arc<Mutex<Kept>>);

impl SpanCapture {
    /// A layer that has seen nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every span seen, in the order they were created.
    pub fn spans(&self) -> Vec<CapturedSpan> {
        self.0.lock().unwrap().spans.clone()
    }

    /// The spans named `name`.
    pub fn named(&self, name: &str) -> Vec<CapturedSpan> {
        self.spans()
            .into_iter()
            .filter(|s| s.name == name)
            .collect()
    }

    /// Everything seen as text (span names, attributes, events' fields): to check that a value
    /// (a raw key) appears nowhere.
    pub fn text(&self) -> String {
        let kept = self.0.lock().unwrap();
        let mut text = String::new();
        for span in &kept.spans {
            text.push_str(&format!("{} {:?}\n", span.name, span.fields));
        }
        for event in &kept.events {
            text.push_str(event);
            text.push('\n');
        }
        text
    }
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl<S: Subscriber> Layer<S> for SpanCapture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _ctx: Context<'_, S>) {
        let mut span = CapturedSpan {
            name: attrs.metadata().name().to_owned(),
            target: attrs.metadata().target().to_owned(),
            fields: BTreeMap::new(),
        };
        attrs.record(&mut Fields(&mut span.fields));
        let mut kept = self.0.lock().unwrap();
        let index = kept.spans.len();
        kept.spans.push(span);
        kept.open.insert(id.into_u64(), index);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        let mut kept = self.0.lock().unwrap();
        if let Some(&index) = kept.open.get(&id.into_u64()) {
            values.record(&mut Fields(&mut kept.spans[index].fields));
        }
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        let line = format!("{} {:?}", event.metadata().target(), fields);
        self.0.lock().unwrap().events.push(line);
    }
}

/// Runs `run` to its end on a current-thread runtime under a subscriber that captures: its
/// output, and the spans and events it emitted.
pub fn captured<T>(run: impl std::future::Future<Output = T>) -> (T, SpanCapture) {
    use tracing_subscriber::layer::SubscriberExt;
    let capture = SpanCapture::new();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let value = tracing::subscriber::with_default(subscriber, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime")
            .block_on(run)
    });
    (value, capture)
}
