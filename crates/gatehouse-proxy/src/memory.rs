//! The C allocator, tuned for a relay that idles for hours between frames
//! (glibc only; elsewhere these do nothing).
//!
//! Measured on the wrap bench (issue 2): without tuning, memory freed by the
//! scanner's build thread stayed in that thread's own arena, and the buffers
//! of a 10 MB frame stayed in the heap after the frame was gone (glibc raises
//! its mmap threshold to the size of the first large block freed, up to
//! 32 MiB, so later large blocks come from the heap and are kept). And
//! after a run of calls, their freed buffers stay in the allocator's free
//! lists until wrap has been idle a while ([`trim_when_idle`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long wrap reads no frame before its free memory goes back.
pub const IDLE_TRIM_AFTER: Duration = Duration::from_secs(2);

/// Large blocks always mapped on their own: `M_MMAP_THRESHOLD = 128 KiB`
/// (glibc's default start value, now fixed), so a frame buffer above it is
/// returned to the system when it is freed. Call before any other thread
/// starts. (`M_ARENA_MAX = 1` was measured and dropped: the scanner's build
/// thread then held the one arena's lock against start-up; BENCHMARKS.md.)
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    // SAFETY: mallopt only sets allocator parameters; it is called before
    // the runtime or any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

/// Returns whole free pages of the heap to the system (after a burst of
/// temporary allocations, such as compiling the scanner's rules).
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    // SAFETY: malloc_trim takes the allocator's own locks; no pointer is
    // passed.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Returns free memory to the system once per idle spell (`trim`:
/// [`release_free_memory`]): when `turns` (counted by the relay loop) has
/// not moved for [`IDLE_TRIM_AFTER`], so 2–4 s after the last frame. A busy
/// relay is never trimmed: the next call would fault the pages in again.
pub async fn trim_when_idle(turns: Arc<AtomicU64>, mut trim: impl FnMut()) {
    let mut seen = turns.load(Ordering::Relaxed);
    let mut trimmed = false;
    loop {
        tokio::time::sleep(IDLE_TRIM_AFTER).await;
        let now = turns.load(Ordering::Relaxed);
        if now != seen {
            seen = now;
            trimmed = false;
        } else if !trimmed {
            trim();
            trimmed = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[tokio::test(start_paused = true)]
    async fn memory_is_trimmed_once_per_idle_spell() {
        let turns = Arc::new(AtomicU64::new(0));
        let trims = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&trims);
        tokio::spawn(trim_when_idle(Arc::clone(&turns), move || {
            counted.fetch_add(1, Ordering::Relaxed);
        }));
        let step = IDLE_TRIM_AFTER / 4;
        // Busy: a turn every quarter of the idle time.
        for _ in 0..20 {
            turns.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(step).await;
        }
        assert_eq!(trims.load(Ordering::Relaxed), 0, "never while busy");
        tokio::time::sleep(IDLE_TRIM_AFTER * 2 + step).await;
        assert_eq!(trims.load(Ordering::Relaxed), 1, "once idle");
        tokio::time::sleep(IDLE_TRIM_AFTER * 10).await;
        assert_eq!(trims.load(Ordering::Relaxed), 1, "once per idle spell");
        turns.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(IDLE_TRIM_AFTER * 3).await;
        assert_eq!(
            trims.load(Ordering::Relaxed),
            2,
            "and again after the next call"
        );
    }
}
