//! Live events: one task tails the events table and broadcasts new rows;
//! each `GET /api/events/stream?ticket=…` (Server-Sent Events) redeems a
//! single-use ticket and forwards matching rows until the session is
//! revoked, the client leaves or the server shuts down.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures_util::Stream;
use gatehouse_store::EventFilter;
use serde_json::Value;
use tokio::sync::broadcast;

use crate::api::events::{event_json, EventQuery};
use crate::error::{ApiError, ApiResult};
use crate::AppState;

/// Polls for events with ids above the last one seen and broadcasts them.
/// Cheap when idle: one indexed `MAX(id)` per tick.
pub async fn tail_events(state: AppState, every: Duration) {
    let mut shutdown = state.shutdown.clone();
    let mut last = state.store.latest_event_id().await.unwrap_or(0);
    let mut names: HashMap<String, String> = HashMap::new();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        if *shutdown.borrow() {
            return;
        }
        let Ok(latest) = state.store.latest_event_id().await else {
            continue;
        };
        if latest <= last {
            continue;
        }
        let filter = EventFilter {
            after_id: Some(last),
            limit: 500,
            ..EventFilter::default()
        };
        let Ok(rows) = state.store.query_events(&filter).await else {
            continue;
        };
        if rows.iter().any(|e| {
            e.server_id
                .as_ref()
                .is_some_and(|id| !names.contains_key(id))
        }) {
            names = crate::api::server_names(&state).await.unwrap_or_default();
        }
        for ev in &rows {
            last = last.max(ev.id);
            // No receivers is fine: nobody is watching right now.
            let _ = state.events.send(Arc::new(event_json(ev, &names)));
        }
        if rows.is_empty() {
            last = latest;
        }
    }
}

/// `GET /api/events/stream?ticket=…&server=…&type=…` — Server-Sent Events.
pub async fn events_stream(
    State(state): State<AppState>,
    Query(q): Query<EventQuery>,
) -> ApiResult<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>> {
    let ticket = q.ticket.clone().unwrap_or_default();
    let session = state
        .auth
        .redeem_ticket(&ticket)
        .ok_or(ApiError::TicketInvalid)?;
    let rx = state.events.subscribe();
    let check = tokio::time::interval(Duration::from_secs(1));
    let shutdown = state.shutdown.clone();
    let stream = futures_util::stream::unfold(
        (rx, check, shutdown, state, session, q),
        |(mut rx, mut check, mut shutdown, state, session, q)| async move {
            loop {
                tokio::select! {
                    got = rx.recv() => match got {
                        Ok(ev) if q.matches(&ev) => {
                            let id = ev["id"].as_i64().unwrap_or(0).to_string();
                            let item = SseEvent::default().event("event").id(id).data(ev.to_string());
                            return Some((Ok(item), (rx, check, shutdown, state, session, q)));
                        }
                        Ok(_) => continue,
                        Err(broadcast::error::RecvError::Lagged(n)) => {
                            let item = SseEvent::default().event("lagged").data(n.to_string());
                            return Some((Ok(item), (rx, check, shutdown, state, session, q)));
                        }
                        Err(broadcast::error::RecvError::Closed) => return None,
                    },
                    _ = check.tick() => {
                        if !state.auth.session_alive(&session) {
                            return None;
                        }
                    }
                    _ = shutdown.changed() => return None,
                }
            }
        },
    );
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// Whether a broadcast event passes the stream's filters.
impl EventQuery {
    pub(crate) fn matches(&self, ev: &Value) -> bool {
        let eq = |want: &Option<String>, field: &str| {
            want.as_ref()
                .is_none_or(|w| ev[field].as_str() == Some(w.as_str()))
        };
        let sev_ok = self.severity.as_ref().is_none_or(|min| {
            let rank = |s: &str| gatehouse_store::Severity::parse(s);
            match (rank(min), ev["severity"].as_str().and_then(rank)) {
                (Some(min), Some(got)) => got >= min,
                _ => false,
            }
        });
        eq(&self.server, "server_id")
            && eq(&self.tool, "tool")
            && eq(&self.r#type, "type")
            && eq(&self.action, "action")
            && sev_ok
    }
}
