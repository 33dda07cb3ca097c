//! The fast path for a server alone in its client session (issue 5): its
//! calls are judged against an in-memory window, with no database round trip
//! and no write per call, and handed over before they can matter.
//!
//! Protocol (`gatehouse_store::members`): each wrap process joins its
//! session at start. A process that finds no other live member is *alone*.
//! A poller watches the session's stamp file (one byte appended per join and
//! leave, so a `stat` detects them) and re-reads the members when it changes
//! (and every few seconds, to notice crashed members); every call checks the
//! stamp's length before it is judged (`Presence::catch_up`), through a
//! handle kept open, which spares the path lookup. When a
//! process that was alone sees a later member, it writes its in-memory calls (with their
//! results' taint marks and its cool-down) to the shared window and
//! acknowledges the join in one transaction; every member acknowledges every
//! later member. A joiner checks its first call only once all earlier
//! members have acknowledged it, so no read made while a server was alone
//! is missed by a send of the server that joined.
//!
//! The marks of a read's result, taken while alone, are not needed to judge
//! this server's own calls (only other servers' reads count), so they are
//! taken off the relay's thread once the result is forwarded
//! ([`Presence::mark_later`]); a hand-over or a leave waits for them first
//! ([`Presence::lock_marked`]).
//!
//! The state outlives the process: a process that leaves while alone writes
//! its unwritten calls and cool-down in the transaction that removes its
//! row (`Store::leave_session`), and a process that starts alone, or becomes
//! alone again, loads the session's calls still in the window (other
//! servers' reads with their taint marks, its own calls) and its cool-down
//! (`Store::session_state`). A reader's exit does not free a sender; a
//! restart does not reset a burst cool-down or a rate limit.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use gatehouse_engine::cross_server::{self, Bucket, TaintKey, ToolClass};
use gatehouse_store::{now_ms, BucketState, CallId, LocalCall, Store};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::{Mutex, MutexGuard, Notify, OwnedMutexGuard};
use tracing::warn;

/// How often the stamp file is checked.
const POLL: Duration = Duration::from_millis(100);
/// How often members are re-read even without a stamp change (crashed
/// processes never append to it).
const REFRESH: Duration = Duration::from_secs(5);
/// How long a joiner waits for earlier members to acknowledge it (they
/// notice within one poll; the margin is for a loaded machine).
pub const JOIN_WAIT: Duration = Duration::from_secs(3);
/// How long a hand-over or a leave waits for marks being taken (a 1 MB
/// result takes about 10 ms); past it they go without them, with a warning.
const MARK_WAIT: Duration = Duration::from_secs(5);

/// A call kept in memory while alone.
pub struct LocalEntry {
    seq: u64,
    /// Another server's call (loaded from the shared window when this
    /// process became alone); None: this server's own.
    pub server: Option<String>,
    /// Already in the shared window (loaded from it): never written again.
    stored: bool,
    pub class: ToolClass,
    pub call: LocalCall,
}

/// A recorded read waiting for its result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pending {
    Local(u64),
    Stored(CallId),
}

/// What the mutex guards: the mode and the in-memory window.
pub struct Local {
    /// No other live member: calls are judged here.
    pub alone: bool,
    /// Every earlier member acknowledged this one's join.
    join_synced: bool,
    /// Highest member id this process has acknowledged.
    synced_for: i64,
    pub calls: VecDeque<LocalEntry>,
    /// How many of `calls` are other servers' (loaded from the shared
    /// window): with none, no call here can follow another server's read,
    /// and nothing walks the window to find one.
    others: usize,
    pub bucket: Option<Bucket>,
    /// Recorded reads by request id.
    pub pending: HashMap<String, Pending>,
    next_seq: u64,
    /// Results forwarded whose marks are being taken
    /// ([`Presence::mark_later`]).
    marking: usize,
}

impl Local {
    /// An empty window for member `member`, judging here when `alone`.
    fn new(alone: bool, member: i64) -> Local {
        Local {
            alone,
            join_synced: alone,
            synced_for: member,
            calls: VecDeque::new(),
            others: 0,
            bucket: None,
            pending: HashMap::new(),
            next_seq: 0,
            marking: 0,
        }
    }

    /// Whether another server's calls are in the window (O(1)).
    pub fn holds_others(&self) -> bool {
        self.others > 0
    }

    /// Whether another server's read with its result's taint marks is in
    /// the window: only then can a call's arguments link to anything.
    pub fn holds_others_marks(&self) -> bool {
        self.holds_others()
            && self
                .calls
                .iter()
                .any(|e| e.server.is_some() && e.call.result.is_some())
    }

    /// Empties the window.
    fn clear_calls(&mut self) {
        self.calls.clear();
        self.others = 0;
    }

    /// Records a call that passed; `request` is set for reads (their result
    /// adds taint marks). Calls older than `window_ms` are dropped.
    pub fn record(
        &mut self,
        class: ToolClass,
        call: LocalCall,
        request: Option<String>,
        window_ms: i64,
    ) {
        let seq = self.push(None, false, class, call, window_ms);
        if let Some(request) = request {
            self.pending.insert(request, Pending::Local(seq));
        }
    }

    fn push(
        &mut self,
        server: Option<String>,
        stored: bool,
        class: ToolClass,
        call: LocalCall,
        window_ms: i64,
    ) -> u64 {
        let horizon = call.time_ms.saturating_sub(window_ms);
        while self.calls.front().is_some_and(|e| e.call.time_ms < horizon) {
            if self.calls.pop_front().is_some_and(|e| e.server.is_some()) {
                self.others -= 1;
            }
        }
        self.others += usize::from(server.is_some());
        let seq = self.next_seq;
        self.next_seq += 1;
        self.calls.push_back(LocalEntry {
            seq,
            server,
            stored,
            class,
            call,
        });
        seq
    }

    /// Replaces the window with the session's stored state: its calls
    /// since the window start (this server's and others', with their
    /// results' taint marks) and this server's limiter state.
    fn load(
        &mut self,
        server_id: &str,
        entries: Vec<gatehouse_store::WindowEntry>,
        bucket: Option<BucketState>,
        window_ms: i64,
    ) {
        self.clear_calls();
        for e in entries {
            let class = ToolClass::parse(&e.category).unwrap_or(ToolClass::Unknown);
            // Other servers' calls matter only as what later calls may
            // carry (sequence rules): those whose results leave marks.
            let server = (e.server_id != server_id).then_some(e.server_id);
            if server.is_some() && !class.leaves_marks() {
                continue;
            }
            let call = LocalCall {
                tool: e.tool,
                category: e.category,
                time_ms: e.time_ms,
                outcome: e.outcome,
                result: e.result,
            };
            self.push(server, true, class, call, window_ms);
        }
        if let Some(b) = bucket {
            self.bucket = Some(Bucket {
                tokens: b.tokens,
                updated_ms: b.updated_ms,
                cooldown_until_ms: b.cooldown_until_ms,
            });
        }
    }

    /// This server's calls not yet in the shared window (a hand-over or a
    /// leave writes these).
    fn unstored_entries(&self) -> impl Iterator<Item = &LocalEntry> {
        self.calls
            .iter()
            .filter(|e| e.server.is_none() && !e.stored)
    }

    /// [`Local::unstored_entries`]' calls, with their sequence numbers.
    fn unstored(&self) -> (Vec<u64>, Vec<LocalCall>) {
        self.unstored_entries()
            .map(|e| (e.seq, e.call.clone()))
            .unzip()
    }

    fn bucket_state(&self) -> Option<BucketState> {
        self.bucket.map(|b| BucketState {
            tokens: b.tokens,
            updated_ms: b.updated_ms,
            cooldown_until_ms: b.cooldown_until_ms,
        })
    }

    /// Attaches a result's taint marks to a local read; false when it is
    /// no longer in the window.
    pub fn attach(&mut self, seq: u64, marks: Vec<u8>) -> bool {
        // Entries are pushed in `seq` order and only popped from the front.
        match self
            .calls
            .binary_search_by_key(&seq, |e| e.seq)
            .ok()
            .and_then(|i| self.calls.get_mut(i))
        {
            Some(entry) => {
                entry.call.result = Some(marks);
                true
            }
            None => false,
        }
    }
}

/// This process's membership of its session.
pub struct Presence {
    store: Store,
    session: String,
    server_id: String,
    member: i64,
    stamp: PathBuf,
    /// The stamp, open: its length without a path lookup. The poller
    /// reopens it if the file at `stamp` is no longer this one.
    stamp_file: std::sync::Mutex<Option<std::fs::File>>,
    /// The stamp file's length when members were last read.
    seen_len: AtomicU64,
    window_ms: i64,
    /// Shared so a result can be forwarded under a lock held from before
    /// it is looked up (`cross::LateMarks`).
    pub local: Arc<Mutex<Local>>,
    /// Forwarded results whose marks are still to be taken.
    unmarked: std::sync::Mutex<Unmarked>,
    /// Told each time marks are attached.
    marked: Notify,
}

/// Results of reads made while alone, forwarded, waiting for their marks.
#[derive(Default)]
struct Unmarked {
    key: Option<TaintKey>,
    results: Vec<(u64, Value)>,
    /// A thread of the runtime's blocking pool is taking them.
    taking: bool,
}

/// Attaches marks taken for forwarded results (an entry that left the
/// window meanwhile is skipped).
fn attach_marks(local: &mut Local, marked: Vec<(u64, Vec<u8>)>) {
    local.marking = local.marking.saturating_sub(marked.len());
    for (seq, marks) in marked {
        local.attach(seq, marks);
    }
}

/// Whether process `pid` still exists (unverifiable platforms: assume yes,
/// which only costs speed).
#[allow(unsafe_code)]
fn alive(pid: i64) -> bool {
    #[cfg(unix)]
    {
        let Ok(pid) = libc::pid_t::try_from(pid) else {
            return false;
        };
        // SAFETY: signal 0 only checks that the process exists.
        let rc = unsafe { libc::kill(pid, 0) };
        rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        true
    }
}

/// The stamp file of a session (its name is a hash: session keys are not
/// secret, but need not be file names).
fn stamp_path(home: &Path, session: &str) -> PathBuf {
    let digest = Sha256::digest(session.as_bytes());
    home.join("sessions").join(hex::encode(&digest[..12]))
}

/// Appends a byte to the stamp; `sessions/` is 0700 and stamps 0600, like
/// the rest of the home (they say which client sessions run). Returns the
/// stamp, open.
fn touch(stamp: &Path) -> Option<std::fs::File> {
    let write = || -> std::io::Result<std::fs::File> {
        if let Some(dir) = stamp.parent() {
            gatehouse_store::home::ensure_private_dir(dir)?;
        }
        let mut options = std::fs::OpenOptions::new();
        options.create(true).append(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let mut file = options.open(stamp)?;
        file.write_all(b".")?;
        Ok(file)
    };
    write()
        .inspect_err(
            |err| warn!(%err, path = %stamp.display(), "could not touch the session stamp"),
        )
        .ok()
}

fn stamp_len(stamp: &Path) -> u64 {
    std::fs::metadata(stamp).map(|m| m.len()).unwrap_or(0)
}

impl Presence {
    /// Joins the session; `window_ms` is how long calls are kept in memory.
    pub async fn join(
        store: Store,
        home: &Path,
        session: &str,
        server_id: &str,
        window_ms: i64,
    ) -> gatehouse_store::Result<Arc<Presence>> {
        let stamp = stamp_path(home, session);
        // The stamp's length before the members are read: a join or leave
        // after that read (even while the state below loads) changes it,
        // and the poller re-reads the members once for our own byte.
        let seen_len = stamp_len(&stamp);
        // Busy: nothing was written, so joining again is safe.
        let (member, others) = crate::busy::retry_busy(|| {
            store.join_session(session, server_id, std::process::id(), now_ms())
        })
        .await?;
        let stamp_file = touch(&stamp);
        let live: Vec<i64> = others
            .iter()
            .filter(|m| alive(m.pid))
            .map(|m| m.id)
            .collect();
        let alone = live.is_empty();
        // Alone: the session's recent calls (a server that left, this one
        // before a restart) and this server's limiter state still count.
        let state = if alone {
            let since = now_ms().saturating_sub(window_ms);
            Some(store.session_state(session, server_id, since).await?)
        } else {
            None
        };
        let presence = Arc::new(Presence {
            store,
            session: session.to_owned(),
            server_id: server_id.to_owned(),
            member,
            seen_len: AtomicU64::new(seen_len),
            stamp,
            stamp_file: std::sync::Mutex::new(stamp_file),
            window_ms,
            local: Arc::new(Mutex::new(Local::new(alone, member))),
            unmarked: std::sync::Mutex::new(Unmarked::default()),
            marked: Notify::new(),
        });
        if let Some((entries, bucket)) = state {
            let mut local = presence.local.lock().await;
            local.load(server_id, entries, bucket, window_ms);
        }
        tokio::spawn(Arc::clone(&presence).poll());
        Ok(presence)
    }

    /// Leaves the session (the process ends). Alone, its calls that still
    /// matter (`keep(class, age_ms)`) and its limiter state are written
    /// first (one transaction with the leave): a restart of this server, or
    /// another server started later in the session, must still see them.
    pub async fn leave(&self, keep: impl Fn(ToolClass, i64) -> bool) {
        let mut local = self.lock_marked().await;
        let done = if local.alone {
            let now = now_ms();
            let calls: Vec<LocalCall> = local
                .unstored_entries()
                .filter(|e| keep(e.class, now.saturating_sub(e.call.time_ms)))
                .map(|e| e.call.clone())
                .collect();
            let bucket = local.bucket_state();
            self.store
                .leave_session(
                    &self.session,
                    self.member,
                    &self.server_id,
                    &calls,
                    bucket.as_ref(),
                )
                .await
        } else {
            self.store.remove_members(&[self.member]).await
        };
        // Nothing is judged here any more; a hand-over after this would
        // write the calls twice.
        local.alone = false;
        local.clear_calls();
        drop(local);
        if let Err(err) = done {
            warn!(%err, "could not leave the session");
        }
        touch(&self.stamp);
    }

    /// Takes the marks of `results` (reads' results already forwarded
    /// while alone) on a thread of the blocking pool, so the relay reads
    /// the next frame at once, and attaches them there. `local` is the
    /// lock held since the results were looked up: it counts them as on
    /// their way before it is released.
    pub fn mark_later(
        self: &Arc<Self>,
        key: &TaintKey,
        mut local: OwnedMutexGuard<Local>,
        results: Vec<(u64, Value)>,
    ) {
        local.marking += results.len();
        drop(local);
        let mut unmarked = self.unmarked.lock().unwrap_or_else(|e| e.into_inner());
        unmarked.key.get_or_insert_with(|| key.clone());
        unmarked.results.extend(results);
        if !unmarked.taking {
            unmarked.taking = true;
            let presence = Arc::clone(self);
            // Never run once the runtime shuts down: `lock_marked` then
            // takes them itself.
            drop(tokio::task::spawn_blocking(move || {
                while let Some(marked) = presence.take_marks(true) {
                    let mut local = presence.local.blocking_lock();
                    attach_marks(&mut local, marked);
                    drop(local);
                    presence.marked.notify_waiters();
                }
            }));
        }
    }

    /// The marks of the results no thread has taken yet, taken on this
    /// one (None: none wait). The blocking-pool thread (`worker`) stops
    /// then, and the next [`Presence::mark_later`] starts one again.
    fn take_marks(&self, worker: bool) -> Option<Vec<(u64, Vec<u8>)>> {
        let mut unmarked = self.unmarked.lock().unwrap_or_else(|e| e.into_inner());
        if unmarked.results.is_empty() {
            unmarked.taking &= !worker;
            return None;
        }
        // Set with the first results.
        let key = unmarked.key.clone()?;
        let results = std::mem::take(&mut unmarked.results);
        drop(unmarked);
        Some(
            results
                .into_iter()
                .map(|(seq, result)| (seq, cross_server::taint::result_marks(&key, &result)))
                .collect(),
        )
    }

    /// The session lock, once no marks are on their way: what a hand-over
    /// or a leave writes must hold every forwarded read's marks. Marks no
    /// thread has taken yet are taken here.
    pub async fn lock_marked(&self) -> MutexGuard<'_, Local> {
        let deadline = tokio::time::Instant::now() + MARK_WAIT;
        loop {
            let own = self.take_marks(false);
            let mut local = self.local.lock().await;
            if let Some(marked) = own {
                attach_marks(&mut local, marked);
            }
            if local.marking == 0 {
                return local;
            }
            // Being taken on another thread: wait until it attaches them.
            let attached = self.marked.notified();
            drop(local);
            if tokio::time::timeout_at(deadline, attached).await.is_err() {
                let mut local = self.local.lock().await;
                warn!(
                    results = local.marking,
                    "gave up waiting for taint marks: those reads go without them"
                );
                local.marking = 0;
                return local;
            }
        }
    }

    /// Waits until every earlier live member acknowledged this one's join
    /// (once; immediate afterwards). Dead members are removed on the way.
    pub async fn wait_join_synced(&self) -> Result<(), String> {
        if self.local.lock().await.join_synced {
            return Ok(());
        }
        let deadline = tokio::time::Instant::now() + JOIN_WAIT;
        loop {
            let waiting = self
                .store
                .unsynced_members(&self.session, self.member)
                .await
                .map_err(|e| e.to_string())?;
            let dead: Vec<i64> = waiting
                .iter()
                .filter(|m| !alive(m.pid))
                .map(|m| m.id)
                .collect();
            if !dead.is_empty() {
                let _ = self.store.remove_members(&dead).await;
            }
            let live: Vec<&str> = waiting
                .iter()
                .filter(|m| !dead.contains(&m.id))
                .map(|m| m.server_id.as_str())
                .collect();
            if live.is_empty() {
                self.local.lock().await.join_synced = true;
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "{} of the session did not hand over its recent calls within {} ms",
                    live.join(", "),
                    JOIN_WAIT.as_millis()
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Before a call is judged: a join or leave the poller has not seen yet
    /// (the stamp grew) is handled now, so no call is judged alone after
    /// another server joined (one `lseek`).
    pub async fn catch_up(&self) {
        let len = self.stamp_len();
        if len != self.seen_len.load(Ordering::Acquire) {
            self.refresh_members(len).await;
        }
    }

    /// The poller: notices joins and leaves, syncs, and returns to the fast
    /// path when this process is alone again. Ends when the process leaves
    /// (the task is dropped with the runtime).
    async fn poll(self: Arc<Self>) {
        let mut refreshed = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(POLL).await;
            let len = self.stamp_len_by_path();
            if len == self.seen_len.load(Ordering::Acquire) && refreshed.elapsed() < REFRESH {
                continue;
            }
            refreshed = tokio::time::Instant::now();
            self.refresh_members(len).await;
        }
    }

    /// The stamp's length, through the open handle (by path without one):
    /// its end, by a seek (the handle is only ever read for its length):
    /// 0.15 µs on this machine against 0.43 µs to read its metadata.
    fn stamp_len(&self) -> u64 {
        use std::io::{Seek, SeekFrom};
        let file = self.stamp_file.lock().unwrap_or_else(|e| e.into_inner());
        match file.as_ref().map(|mut f| f.seek(SeekFrom::End(0))) {
            Some(Ok(len)) => len,
            _ => stamp_len(&self.stamp),
        }
    }

    /// The stamp's length by path. A handle that reads another length is
    /// on a file since removed or replaced (or the stamp just grew): it is
    /// reopened, so `catch_up` follows the file the other members touch.
    fn stamp_len_by_path(&self) -> u64 {
        let len = stamp_len(&self.stamp);
        let mut file = self.stamp_file.lock().unwrap_or_else(|e| e.into_inner());
        let handle_len = file
            .as_ref()
            .and_then(|f| f.metadata().ok())
            .map(|m| m.len());
        if handle_len != Some(len) {
            *file = std::fs::File::open(&self.stamp).ok();
        }
        len
    }

    /// Re-reads the members (noting the stamp's length `len`, read before
    /// them, so a change made meanwhile is seen next time) and hands over if
    /// one joined.
    async fn refresh_members(&self, len: u64) {
        self.seen_len.store(len, Ordering::Release);
        match self.refresh().await {
            Ok(()) => {}
            // Busy under load: again at the next poll, not after REFRESH
            // (a joiner waits for this process's acknowledgement).
            Err(gatehouse_store::StoreError::Busy) => {
                self.seen_len.store(u64::MAX, Ordering::Release)
            }
            Err(gatehouse_store::StoreError::Closed) => {}
            Err(err) => warn!(%err, "could not refresh the session's members"),
        }
    }

    async fn refresh(&self) -> gatehouse_store::Result<()> {
        let members = self.store.session_members(&self.session).await?;
        let (others, dead): (Vec<_>, Vec<_>) = members
            .into_iter()
            .filter(|m| m.id != self.member)
            .partition(|m| alive(m.pid));
        if !dead.is_empty() {
            let ids: Vec<i64> = dead.iter().map(|m| m.id).collect();
            self.store.remove_members(&ids).await?;
        }
        // A hand-over writes the marks: none may be on their way.
        let mut local = self.lock_marked().await;
        let Some(newest) = others.iter().map(|m| m.id).max() else {
            if !local.alone {
                // Alone again: continue from the stored window (other
                // servers' reads with their taint marks, this server's calls
                // and cool-down), so the sequence rules, bursts and rate
                // limits stay exact after the others left.
                let since = now_ms().saturating_sub(self.window_ms);
                let (entries, bucket) = self
                    .store
                    .session_state(&self.session, &self.server_id, since)
                    .await?;
                local.load(&self.server_id, entries, bucket, self.window_ms);
                local.alone = true;
                local.join_synced = true;
            }
            return Ok(());
        };
        if !local.alone && newest <= local.synced_for {
            return Ok(());
        }
        // Hand over (the lock is held, so no call is judged meanwhile): only
        // this server's calls not already in the shared window.
        let (seqs, calls) = local.unstored();
        let bucket = local.bucket_state();
        let ids = self
            .store
            .sync_session_calls(
                &self.session,
                self.member,
                &self.server_id,
                newest,
                &calls,
                bucket.as_ref(),
            )
            .await?;
        let stored: HashMap<u64, CallId> = seqs.into_iter().zip(ids).collect();
        for pending in local.pending.values_mut() {
            if let Pending::Local(seq) = *pending {
                if let Some(id) = stored.get(&seq) {
                    *pending = Pending::Stored(*id);
                }
            }
        }
        local.pending.retain(|_, p| matches!(p, Pending::Stored(_)));
        local.clear_calls();
        local.alone = false;
        local.synced_for = newest;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn session_stamps_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let home = tempfile::tempdir().unwrap();
        let stamp = stamp_path(home.path(), "client-1");
        touch(&stamp);
        touch(&stamp);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(stamp.parent().unwrap()), 0o700, "sessions/ is 0700");
        assert_eq!(mode(&stamp), 0o600, "stamps are 0600");
        assert_eq!(stamp_len(&stamp), 2, "each touch appends one byte");
    }

    #[tokio::test]
    async fn a_join_waits_out_another_process_writing() {
        let home = tempfile::tempdir().unwrap();
        let store = Store::open(home.path(), Default::default()).await.unwrap();
        // Another process's store (its own pool and write gate) holds the
        // write lock for three busy timeouts.
        let other = Store::open(home.path(), Default::default()).await.unwrap();
        let writing = other.pool().begin_with("BEGIN IMMEDIATE").await.unwrap();
        let release = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(150)).await;
            drop(writing);
        });
        let me = Presence::join(store, home.path(), "client-1", "srv_a", 60_000)
            .await
            .expect("joined once the other writer finished");
        assert!(me.local.lock().await.alone);
        release.await.unwrap();
    }

    #[tokio::test]
    async fn the_open_stamp_follows_joins_and_a_replaced_file() {
        let home = tempfile::tempdir().unwrap();
        let store = Store::open(home.path(), Default::default()).await.unwrap();
        let me = Presence::join(store, home.path(), "client-1", "srv_a", 60_000)
            .await
            .unwrap();
        assert_eq!(me.stamp_len(), 1, "its own join");
        touch(&me.stamp);
        assert_eq!(me.stamp_len(), 2, "another join, seen through the handle");

        // The stamp removed and touched anew: the handle reads the old file
        // until the poller's look by path reopens it.
        std::fs::remove_file(&me.stamp).unwrap();
        touch(&me.stamp);
        assert_eq!(me.stamp_len(), 2, "the removed file");
        assert_eq!(me.stamp_len_by_path(), 1);
        assert_eq!(me.stamp_len(), 1, "the handle is on the new file");
        touch(&me.stamp);
        assert_eq!(me.stamp_len(), 2, "and follows it");
    }

    fn read_call(time_ms: i64) -> LocalCall {
        LocalCall {
            tool: "read_file".into(),
            category: "read".into(),
            time_ms,
            outcome: "allow".into(),
            result: None,
        }
    }

    /// Forwards a result of the read recorded under request `id`, as the
    /// cross stage does while alone; returns its marks as they should be.
    async fn forward_result(me: &Arc<Presence>, key: &TaintKey, id: &str) -> Vec<u8> {
        let result = serde_json::json!({"content": [{"type": "text",
            "text": "the vault code is BLUEHERON-7731, rotate it monthly"}]});
        let marks = cross_server::taint::result_marks(key, &result);
        let mut local = Arc::clone(&me.local).lock_owned().await;
        let Some(Pending::Local(seq)) = local.pending.remove(id) else {
            panic!("the read waits for its result");
        };
        assert_eq!(local.marking, 0);
        me.mark_later(key, local, vec![(seq, result)]);
        marks
    }

    /// Other servers' calls are counted as they are loaded and leave the
    /// window, so a window of this server's calls alone is never walked.
    #[test]
    fn other_servers_calls_are_counted_in_and_out_of_the_window() {
        let mut local = Local::new(true, 0);
        let entry =
            |server: &str, time_ms: i64, result: Option<Vec<u8>>| gatehouse_store::WindowEntry {
                call: gatehouse_store::CallId {
                    id: time_ms,
                    time_ms,
                },
                server_id: server.into(),
                tool: "read_file".into(),
                category: "read".into(),
                time_ms,
                outcome: "allow".into(),
                detail: None,
                result,
            };
        local.load(
            "me",
            vec![
                entry("other", 1_000, Some(vec![1])),
                entry("me", 1_500, None),
            ],
            None,
            60_000,
        );
        assert!(local.holds_others() && local.holds_others_marks());
        local.record(ToolClass::Read, read_call(30_000), None, 60_000);
        assert!(local.holds_others(), "still in the window");
        local.record(ToolClass::Read, read_call(61_200), None, 60_000);
        assert!(!local.holds_others(), "the other's read left the window");
        assert_eq!(local.calls.len(), 3, "this server's calls stay");
        local.load("me", vec![entry("other", 70_000, None)], None, 60_000);
        assert!(local.holds_others() && !local.holds_others_marks());
        local.clear_calls();
        assert!(!local.holds_others());
    }

    #[tokio::test]
    async fn marks_taken_after_forwarding_are_handed_over_with_the_read() {
        let home = tempfile::tempdir().unwrap();
        let store = Store::open(home.path(), Default::default()).await.unwrap();
        let key = TaintKey::new(&[7; 32]);
        let me = Presence::join(store.clone(), home.path(), "client-1", "srv_a", 60_000)
            .await
            .unwrap();
        let now = now_ms();
        me.local
            .lock()
            .await
            .record(ToolClass::Read, read_call(now), Some("1".into()), 60_000);
        // As if a thread were taking them already: none is started (as
        // when the runtime shuts down), so they wait until a lock takes them.
        me.unmarked.lock().unwrap().taking = true;
        let marks = forward_result(&me, &key, "1").await;
        assert_eq!(me.local.lock().await.marking, 1, "on their way");

        // Another server joins; the hand-over takes the marks first.
        let joiner = Store::open(home.path(), Default::default()).await.unwrap();
        let _other = Presence::join(joiner, home.path(), "client-1", "srv_b", 60_000)
            .await
            .unwrap();
        me.refresh_members(me.stamp_len()).await;
        assert!(!me.local.lock().await.alone, "handed over");
        let (entries, _) = store
            .session_state("client-1", "srv_b", now - 1_000)
            .await
            .unwrap();
        let read = entries
            .iter()
            .find(|e| e.server_id == "srv_a")
            .expect("the read is in the shared window");
        assert_eq!(read.result.as_deref(), Some(&marks[..]), "with its marks");
    }

    #[tokio::test]
    async fn marks_are_taken_and_attached_on_another_thread() {
        let home = tempfile::tempdir().unwrap();
        let store = Store::open(home.path(), Default::default()).await.unwrap();
        let key = TaintKey::new(&[9; 32]);
        let me = Presence::join(store, home.path(), "client-1", "srv_a", 60_000)
            .await
            .unwrap();
        me.local.lock().await.record(
            ToolClass::Read,
            read_call(now_ms()),
            Some("1".into()),
            60_000,
        );
        let marks = forward_result(&me, &key, "1").await;
        let waited = tokio::time::Instant::now();
        // Attached, and the thread stopped (the next result starts one).
        while me.local.lock().await.marking > 0 || me.unmarked.lock().unwrap().taking {
            assert!(waited.elapsed() < Duration::from_secs(10), "never attached");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let local = me.local.lock().await;
        assert_eq!(local.calls[0].call.result.as_deref(), Some(&marks[..]));
    }
}
