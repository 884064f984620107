//! The variants' broker: NATS JetStream through async-nats, a work-queue stream per variant
//! (acked messages leave it, as from a RabbitMQ queue) and one durable pull consumer.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, consumer::pull, stream};
use futures_util::TryStreamExt;
use idempotency_core::Store;
use idempotency_queue::{Handler, IdempotentConsumer, KeyExtractor, nats};

use crate::{Broker, Error, KEY_HEADER, Run, guarded_run, timed};

pub(crate) struct Nats {
    js: jetstream::Context,
    messages: usize,
    concurrency: usize,
    nonce: u128,
}

impl Nats {
    pub(crate) async fn connect(
        url: &str,
        messages: usize,
        concurrency: usize,
        nonce: u128,
    ) -> Result<Self, Error> {
        let js = jetstream::new(async_nats::connect(url).await?);
        Ok(Self {
            js,
            messages,
            concurrency,
            nonce,
        })
    }

    /// The JetStream context the streams are made in.
    pub(crate) fn jetstream(&self) -> &jetstream::Context {
        &self.js
    }

    /// The stream of `subject` (`queue-bench.<nonce>.<variant>`).
    fn stream_name(subject: &str) -> String {
        subject.replace(['.', '-'], "_").to_ascii_uppercase()
    }

    async fn pull(&self, subject: &str) -> Result<jetstream::consumer::PullConsumer, Error> {
        let stream = self.js.get_stream(Self::stream_name(subject)).await?;
        stream.get_consumer("bench").await
    }
}

impl Broker for Nats {
    fn name(&self) -> &'static str {
        "nats"
    }

    fn messages(&self) -> usize {
        self.messages
    }

    async fn declare(&self, variant: &str) -> Result<String, Error> {
        let subject = format!("queue-bench.{}.{variant}", self.nonce);
        let stream = self
            .js
            .create_stream(stream::Config {
                name: Self::stream_name(&subject),
                subjects: vec![subject.clone()],
                retention: stream::RetentionPolicy::WorkQueue,
                ..Default::default()
            })
            .await?;
        stream
            .create_consumer(pull::Config {
                durable_name: Some("bench".to_owned()),
                ack_wait: Duration::from_secs(30),
                max_ack_pending: i64::try_from(self.concurrency * 4)?,
                ..Default::default()
            })
            .await?;
        Ok(subject)
    }

    async fn publish(&self, subject: &str) -> Result<(), Error> {
        // async-nats holds at most 5000 unawaited acks (then `publish` waits for one that is
        // never polled): await them a window at a time.
        const WINDOW: usize = 1000;
        let mut acks = Vec::with_capacity(WINDOW);
        for n in 0..self.messages {
            let mut headers = HeaderMap::new();
            headers.insert(KEY_HEADER, format!("T{n}").as_str());
            let body = format!(r#"{{"trade_no":"T{n}","user_id":{n}}}"#);
            let ack = self
                .js
                .publish_with_headers(subject.to_owned(), headers, body.into())
                .await?;
            acks.push(ack);
            if acks.len() == WINDOW {
                for ack in acks.drain(..) {
                    ack.await?;
                }
            }
        }
        for ack in acks {
            ack.await?;
        }
        Ok(())
    }

    async fn bare<F, Fut>(&self, subject: &str, work: F) -> Result<Run, Error>
    where
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), Error>> + Send,
    {
        let done = Arc::new(AtomicU64::new(0));
        let messages = self.pull(subject).await?.messages().await?;
        let counter = Arc::clone(&done);
        let concurrency = self.concurrency;
        let consume = async move {
            let step = |message: jetstream::Message| {
                let counter = Arc::clone(&counter);
                let key = message
                    .headers
                    .as_ref()
                    .and_then(|headers| headers.get(KEY_HEADER))
                    .map(|value| value.as_str().to_owned());
                let work = work(key.unwrap_or_default());
                async move {
                    work.await?;
                    message.ack().await?;
                    counter.fetch_add(1, Ordering::Relaxed);
                    Ok::<_, Error>(())
                }
            };
            messages
                .map_err(Error::from)
                .try_for_each_concurrent(concurrency, step)
                .await
        };
        timed(self.name(), self.messages, consume, || {
            done.load(Ordering::Relaxed)
        })
        .await
    }

    async fn guarded<S, K, H>(
        &self,
        subject: &str,
        consumer: IdempotentConsumer<S, K, H>,
    ) -> Result<Run, Error>
    where
        S: Store,
        K: KeyExtractor,
        H: Handler,
    {
        let pull = self.pull(subject).await?;
        let concurrency = self.concurrency;
        let consume = move |consumer: Arc<IdempotentConsumer<S, K, H>>| async move {
            // Every message here has its key and one payload: nothing is rejected.
            let dead_letters = nats::DeadLetters::drop_and_log();
            nats::serve_pull(&consumer, &pull, &dead_letters)
                .concurrency(concurrency)
                .await
        };
        guarded_run(self.name(), self.messages, consumer, consume).await
    }

    async fn delete(&self, subject: &str) -> Result<(), Error> {
        self.js.delete_stream(Self::stream_name(subject)).await?;
        Ok(())
    }
}
