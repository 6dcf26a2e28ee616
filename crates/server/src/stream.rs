//! Server-sent events from a generation's updates: the API's own events for its text and end, and a
//! comment line at most once a second while a long prompt is read (and after 5 s of silence), so proxies
//! and clients keep the connection open. A client that hangs up drops the stream, which closes the
//! updates channel: the engine stops at its next window or token.

use std::convert::Infallible;
use std::time::{Duration, Instant};

use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{self, Stream, StreamExt};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_stream::wrappers::UnboundedReceiverStream;

use crate::worker::Update;

/// `first` (the API's opening events), then `map` of each update but the prompt's progress.
pub fn sse<F>(
    rx: UnboundedReceiver<Update>,
    first: Vec<Event>,
    mut map: F,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>>
where
    F: FnMut(Update) -> Vec<Event> + Send + 'static,
{
    let mut said = Instant::now();
    let events = UnboundedReceiverStream::new(rx).flat_map(move |u| {
        let out = match u {
            Update::Prefill { done, total } if said.elapsed() >= Duration::from_secs(1) => {
                said = Instant::now();
                vec![Event::default().comment(format!("reading the prompt: {done} of {total} tokens"))]
            }
            Update::Prefill { .. } => Vec::new(),
            u => map(u),
        };
        stream::iter(out)
    });
    Sse::new(stream::iter(first).chain(events).map(Ok))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(5)).text("keep-alive"))
}

/// An event of JSON data.
pub fn data(v: &serde_json::Value) -> Event {
    Event::default().data(v.to_string())
}

/// An event of JSON data with an event name (Anthropic's and the Responses API's streams).
pub fn named(name: &str, v: &serde_json::Value) -> Event {
    Event::default().event(name).data(v.to_string())
}
