//! The C allocator, tuned for a relay that idles for hours between frames
//! (glibc only; elsewhere these do nothing).
//!
//! Measured on the wrap bench (issue 2): without tuning, memory freed by the
//! scanner's build thread stayed in that thread's own arena, and the buffers
//! of a 10 MB frame stayed in the heap after the frame was gone (glibc raises
//! its mmap threshold to the size of the first large block freed, up to
//! 32 MiB, so later large blocks come from the heap and are kept).

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
