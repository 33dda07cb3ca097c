//! Credentials of the control plane, all in memory and all bearer-style:
//! one-time sign-in tokens (≤ 60 s), session tokens (sent as
//! `Authorization: Bearer`, kept by the UI in `sessionStorage`), single-use
//! event-stream tickets, and CLI challenges answered with an HMAC of the
//! secret in the 0600 `control.json`. Only SHA-256 digests of tokens are
//! kept, so a memory dump of the maps does not yield usable credentials.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// Lifetime of a sign-in link.
pub const SIGNIN_TTL_MS: i64 = 60_000;
/// Lifetime of an event-stream ticket.
pub const TICKET_TTL_MS: i64 = 30_000;
/// Lifetime of a CLI challenge nonce.
pub const CHALLENGE_TTL_MS: i64 = 30_000;
/// Absolute lifetime of a dashboard session.
pub const SESSION_TTL_MS: i64 = 12 * 60 * 60 * 1000;
/// At most this many unredeemed sign-in links or tickets each.
const MAX_PENDING: usize = 64;
/// Domain separation for the CLI challenge MAC.
pub const CLI_MAC_CONTEXT: &str = "gatehouse/cli-signin/v1:";

/// Wall clock in milliseconds since the Unix epoch; injectable for tests.
pub trait Clock: Send + Sync + 'static {
    /// Current time in ms since the epoch.
    fn now_ms(&self) -> i64;
}

/// The real clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }
}

/// A random 256-bit token, base64url without padding.
pub fn random_token() -> String {
    let mut buf = [0u8; 32];
    getrandom::fill(&mut buf).expect("OS random source unavailable");
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(buf)
}

/// A random 128-bit public identifier, hex.
pub fn random_id() -> String {
    let mut buf = [0u8; 16];
    getrandom::fill(&mut buf).expect("OS random source unavailable");
    hex::encode(buf)
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Domain separation for the control plane's proof to the CLI.
pub const CONTROL_PROOF_CONTEXT: &str = "gatehouse/control-proof/v1:";

/// The control plane's proof that it knows the CLI secret, over the Host
/// it was reached at, the challenge and the sign-in path it answers with:
/// a process that took the port (or relays to the real control plane from
/// another one) cannot make a CLI open its link. Hex.
pub fn control_proof(secret: &str, host: &str, nonce: &str, url: &str) -> String {
    hex::encode(
        control_proof_mac(secret, host, nonce, url)
            .finalize()
            .into_bytes(),
    )
}

/// Whether `proof_hex` is [`control_proof`] of these (constant time).
pub fn verify_control_proof(
    secret: &str,
    host: &str,
    nonce: &str,
    url: &str,
    proof_hex: &str,
) -> bool {
    hex::decode(proof_hex).is_ok_and(|p| {
        control_proof_mac(secret, host, nonce, url)
            .verify_slice(&p)
            .is_ok()
    })
}

fn control_proof_mac(secret: &str, host: &str, nonce: &str, url: &str) -> Hmac<Sha256> {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key length");
    for part in [CONTROL_PROOF_CONTEXT, host, "\n", nonce, "\n", url] {
        mac.update(part.as_bytes());
    }
    mac
}

/// HMAC-SHA256 of a CLI challenge nonce under the CLI secret, hex.
pub fn cli_mac(secret: &str, nonce: &str) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key length");
    mac.update(CLI_MAC_CONTEXT.as_bytes());
    mac.update(nonce.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

/// Public view of a dashboard session (never the token).
#[derive(Debug, Clone, serde::Serialize)]
pub struct SessionInfo {
    /// Public id used to revoke it.
    pub id: String,
    /// When it was created (ms since epoch).
    pub created_ms: i64,
    /// When it was last used.
    pub last_seen_ms: i64,
    /// When it stops working.
    pub expires_ms: i64,
    /// Browser user agent at sign-in, truncated.
    pub user_agent: String,
}

/// A new session as handed to the UI once.
#[derive(Debug, Clone, serde::Serialize)]
pub struct NewSession {
    /// The bearer token; shown exactly once.
    pub token: String,
    /// Public session data.
    pub session: SessionInfo,
}

#[derive(Debug)]
struct Pending {
    expires_ms: i64,
    session_id: Option<String>,
}

#[derive(Debug)]
struct SessionRow {
    info: SessionInfo,
}

#[derive(Default)]
struct Inner {
    signins: HashMap<[u8; 32], Pending>,
    tickets: HashMap<[u8; 32], Pending>,
    /// Challenges answered correctly, by digest, until they expire.
    answered: HashMap<[u8; 32], i64>,
    sessions: HashMap<[u8; 32], SessionRow>,
}

/// All credentials of one control plane instance.
pub struct Auth {
    clock: Arc<dyn Clock>,
    cli_secret: String,
    /// This process's key for the tags of its challenge nonces.
    challenge_key: [u8; 32],
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("cli_secret", &"<redacted>")
            .finish_non_exhaustive()
    }
}

fn prune(map: &mut HashMap<[u8; 32], Pending>, now: i64) {
    map.retain(|_, p| p.expires_ms > now);
    if map.len() >= MAX_PENDING {
        // Drop the ones closest to expiry to make room; an attacker who can
        // mint these already holds a credential, so this only bounds memory.
        let mut by_expiry: Vec<_> = map.iter().map(|(k, p)| (p.expires_ms, *k)).collect();
        by_expiry.sort();
        for (_, k) in by_expiry.into_iter().take(map.len() + 1 - MAX_PENDING) {
            map.remove(&k);
        }
    }
}

impl Auth {
    /// New credential store; `cli_secret` is what `control.json` holds.
    pub fn new(clock: Arc<dyn Clock>, cli_secret: String) -> Self {
        let mut challenge_key = [0u8; 32];
        getrandom::fill(&mut challenge_key).expect("OS random source unavailable");
        Auth {
            clock,
            cli_secret,
            challenge_key,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// [`control_proof`] under this control plane's CLI secret.
    pub fn control_proof(&self, host: &str, nonce: &str, url: &str) -> String {
        control_proof(&self.cli_secret, host, nonce, url)
    }

    /// Current time from the injected clock.
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Mints a one-time sign-in token valid for [`SIGNIN_TTL_MS`].
    pub fn mint_signin(&self) -> String {
        let now = self.now_ms();
        let token = random_token();
        let mut inner = self.lock();
        prune(&mut inner.signins, now);
        inner.signins.insert(
            digest(&token),
            Pending {
                expires_ms: now + SIGNIN_TTL_MS,
                session_id: None,
            },
        );
        token
    }

    /// Redeems a sign-in token (consuming it even when expired) for a session.
    pub fn redeem_signin(&self, token: &str, user_agent: &str) -> Option<NewSession> {
        let now = self.now_ms();
        let mut inner = self.lock();
        let pending = inner.signins.remove(&digest(token))?;
        if pending.expires_ms <= now {
            return None;
        }
        let token = random_token();
        let info = SessionInfo {
            id: random_id(),
            created_ms: now,
            last_seen_ms: now,
            expires_ms: now + SESSION_TTL_MS,
            user_agent: user_agent
                .chars()
                .filter(|c| !c.is_control())
                .take(200)
                .collect(),
        };
        inner
            .sessions
            .insert(digest(&token), SessionRow { info: info.clone() });
        Some(NewSession {
            token,
            session: info,
        })
    }

    /// Checks a bearer token; returns the session id and refreshes last-seen.
    pub fn check_session(&self, token: &str) -> Option<String> {
        let now = self.now_ms();
        let mut inner = self.lock();
        let key = digest(token);
        let row = inner.sessions.get_mut(&key)?;
        if row.info.expires_ms <= now {
            inner.sessions.remove(&key);
            return None;
        }
        row.info.last_seen_ms = now;
        Some(row.info.id.clone())
    }

    /// Whether the session with this public id still exists and is unexpired.
    pub fn session_alive(&self, id: &str) -> bool {
        let now = self.now_ms();
        self.lock()
            .sessions
            .values()
            .any(|r| r.info.id == id && r.info.expires_ms > now)
    }

    /// All live sessions, newest first.
    pub fn sessions(&self) -> Vec<SessionInfo> {
        let now = self.now_ms();
        let mut inner = self.lock();
        inner.sessions.retain(|_, r| r.info.expires_ms > now);
        let mut list: Vec<_> = inner.sessions.values().map(|r| r.info.clone()).collect();
        list.sort_by(|a, b| b.created_ms.cmp(&a.created_ms).then(a.id.cmp(&b.id)));
        list
    }

    /// Revokes a session by public id; returns whether one was removed.
    pub fn revoke(&self, id: &str) -> bool {
        let mut inner = self.lock();
        let before = inner.sessions.len();
        inner.sessions.retain(|_, r| r.info.id != id);
        inner
            .tickets
            .retain(|_, p| p.session_id.as_deref() != Some(id));
        inner.sessions.len() != before
    }

    /// Mints a single-use event-stream ticket bound to a session.
    pub fn mint_ticket(&self, session_id: &str) -> String {
        let now = self.now_ms();
        let ticket = random_token();
        let mut inner = self.lock();
        prune(&mut inner.tickets, now);
        inner.tickets.insert(
            digest(&ticket),
            Pending {
                expires_ms: now + TICKET_TTL_MS,
                session_id: Some(session_id.to_owned()),
            },
        );
        ticket
    }

    /// Redeems a ticket (consuming it); returns its session id if valid.
    pub fn redeem_ticket(&self, ticket: &str) -> Option<String> {
        let now = self.now_ms();
        let pending = self.lock().tickets.remove(&digest(ticket))?;
        let id = pending.session_id?;
        (pending.expires_ms > now && self.session_alive(&id)).then_some(id)
    }

    /// Issues a CLI challenge nonce, `<expiry ms>.<random>.<tag>` with the
    /// tag an HMAC under this process's key. Nothing is stored, so a flood
    /// of challenges (the endpoint needs no sign-in) cannot push out the one
    /// the CLI is answering.
    pub fn mint_challenge(&self) -> String {
        let body = format!("{}.{}", self.now_ms() + CHALLENGE_TTL_MS, random_token());
        let tag = hex::encode(self.challenge_tag(&body).finalize().into_bytes());
        format!("{body}.{tag}")
    }

    fn challenge_tag(&self, body: &str) -> Hmac<Sha256> {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.challenge_key).expect("HMAC takes any key length");
        mac.update(body.as_bytes());
        mac
    }

    /// Verifies `mac = HMAC(cli_secret, context || nonce)` for a nonce this
    /// process issued and that has not expired; a nonce answered correctly
    /// once is refused after. (A wrong answer does not use it up: only
    /// answers that verify are remembered, so nobody without the secret can
    /// grow that list.)
    pub fn verify_challenge(&self, nonce: &str, mac_hex: &str) -> bool {
        let now = self.now_ms();
        let Some((body, tag)) = nonce.rsplit_once('.') else {
            return false;
        };
        let issued =
            hex::decode(tag).is_ok_and(|tag| self.challenge_tag(body).verify_slice(&tag).is_ok());
        let expires_ms = body
            .split_once('.')
            .and_then(|(expires, _)| expires.parse::<i64>().ok());
        if !issued || expires_ms.is_none_or(|at| at <= now) {
            return false;
        }
        let Ok(given) = hex::decode(mac_hex) else {
            return false;
        };
        let mut mac = Hmac::<Sha256>::new_from_slice(self.cli_secret.as_bytes())
            .expect("HMAC takes any key length");
        mac.update(CLI_MAC_CONTEXT.as_bytes());
        mac.update(nonce.as_bytes());
        if mac.verify_slice(&given).is_err() {
            return false;
        }
        let mut inner = self.lock();
        inner.answered.retain(|_, expires| *expires > now);
        inner
            .answered
            .insert(digest(nonce), expires_ms.unwrap_or(now))
            .is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI64, Ordering};

    #[derive(Default)]
    struct Manual(AtomicI64);
    impl Clock for Manual {
        fn now_ms(&self) -> i64 {
            self.0.load(Ordering::SeqCst)
        }
    }

    fn auth() -> (Arc<Manual>, Auth) {
        let clock = Arc::new(Manual(AtomicI64::new(1_000_000)));
        (clock.clone(), Auth::new(clock, "s3cret".into()))
    }

    #[test]
    fn signin_is_single_use() {
        let (_, a) = auth();
        let t = a.mint_signin();
        assert!(
            a.redeem_signin(&t, "ua").is_some(),
            "a fresh link must sign in"
        );
        assert!(
            a.redeem_signin(&t, "ua").is_none(),
            "a used link must not sign in twice"
        );
    }

    #[test]
    fn signin_expires_within_60s() {
        let (clock, a) = auth();
        let t = a.mint_signin();
        clock.0.fetch_add(SIGNIN_TTL_MS, Ordering::SeqCst);
        assert!(
            a.redeem_signin(&t, "ua").is_none(),
            "a link 60 s old must be refused"
        );
    }

    #[test]
    fn revoked_session_and_its_tickets_stop_working() {
        let (_, a) = auth();
        let s = a.redeem_signin(&a.mint_signin(), "ua").unwrap();
        let ticket = a.mint_ticket(&s.session.id);
        assert_eq!(
            a.check_session(&s.token).as_deref(),
            Some(s.session.id.as_str())
        );
        assert!(a.revoke(&s.session.id));
        assert!(
            a.check_session(&s.token).is_none(),
            "revoked token must be refused"
        );
        assert!(
            a.redeem_ticket(&ticket).is_none(),
            "tickets of a revoked session must be refused"
        );
    }

    #[test]
    fn ticket_single_use_and_expiry() {
        let (clock, a) = auth();
        let s = a.redeem_signin(&a.mint_signin(), "ua").unwrap();
        let t1 = a.mint_ticket(&s.session.id);
        assert!(a.redeem_ticket(&t1).is_some());
        assert!(a.redeem_ticket(&t1).is_none(), "tickets are single-use");
        let t2 = a.mint_ticket(&s.session.id);
        clock.0.fetch_add(TICKET_TTL_MS + 1, Ordering::SeqCst);
        assert!(
            a.redeem_ticket(&t2).is_none(),
            "expired ticket must be refused"
        );
    }

    #[test]
    fn challenge_needs_the_secret() {
        let (_, a) = auth();
        let n = a.mint_challenge();
        assert!(
            !a.verify_challenge(&n, &cli_mac("wrong", &n)),
            "a wrong secret must fail"
        );
        assert!(a.verify_challenge(&n, &cli_mac("s3cret", &n)));
        assert!(
            !a.verify_challenge(&n, &cli_mac("s3cret", &n)),
            "a nonce answered once is used up"
        );
    }

    #[test]
    fn only_issued_unexpired_challenges_verify_and_a_flood_pushes_none_out() {
        let (clock, a) = auth();
        let first = a.mint_challenge();
        for _ in 0..1000 {
            a.mint_challenge();
        }
        assert!(
            a.verify_challenge(&first, &cli_mac("s3cret", &first)),
            "minting many challenges must not invalidate an earlier one"
        );
        // Made up, or issued by another process: refused even with the secret.
        let other = Auth::new(clock.clone(), "s3cret".into()).mint_challenge();
        let forged = format!("{}.{}.00", clock.now_ms() + 10_000, random_token());
        for nonce in [other.as_str(), forged.as_str(), "", "1.2", "x.y.z"] {
            assert!(
                !a.verify_challenge(nonce, &cli_mac("s3cret", nonce)),
                "{nonce:?} was not issued here"
            );
        }
        // A changed expiry breaks the tag.
        let n = a.mint_challenge();
        let (expires, rest) = n.split_once('.').unwrap();
        let later = format!("{}.{rest}", expires.parse::<i64>().unwrap() + 60_000);
        assert!(!a.verify_challenge(&later, &cli_mac("s3cret", &later)));
        clock.0.fetch_add(CHALLENGE_TTL_MS, Ordering::SeqCst);
        assert!(
            !a.verify_challenge(&n, &cli_mac("s3cret", &n)),
            "an expired challenge must fail"
        );
    }

    #[test]
    fn pending_maps_are_bounded() {
        let (_, a) = auth();
        let tokens: Vec<_> = (0..200).map(|_| a.mint_signin()).collect();
        assert!(
            a.lock().signins.len() <= MAX_PENDING,
            "unredeemed links must not grow without bound"
        );
        assert!(
            a.redeem_signin(tokens.last().unwrap(), "ua").is_some(),
            "the newest link survives pruning"
        );
    }

    #[test]
    fn session_expires() {
        let (clock, a) = auth();
        let s = a.redeem_signin(&a.mint_signin(), "ua").unwrap();
        clock.0.fetch_add(SESSION_TTL_MS, Ordering::SeqCst);
        assert!(
            a.check_session(&s.token).is_none(),
            "sessions have an absolute lifetime"
        );
    }
}
