//! A wrap's memory while it idles for hours between frames: the C allocator
//! (glibc only) and the executable's read-only pages (Linux only); elsewhere
//! these do nothing.
//!
//! Measured on the wrap bench (issue 2): without tuning, memory freed by the
//! scanner's build thread stayed in that thread's own arena, and the buffers
//! of a 10 MB frame stayed in the heap after the frame was gone (glibc raises
//! its mmap threshold to the size of the first large block freed, up to
//! 32 MiB, so later large blocks come from the heap and are kept). And
//! after a run of calls, their freed buffers stay in the allocator's free
//! lists until wrap has been idle a while, and code only start-up ran
//! stays resident ([`trim_when_idle`]).

use std::ops::Range;
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

/// The executable's read-only segments (its code and constants), page
/// aligned inwards; empty where they cannot be found or must not be dropped.
pub fn code_segments() -> Vec<Range<usize>> {
    #[cfg(all(target_os = "linux", target_pointer_width = "64"))]
    {
        elf::own_segments()
    }
    #[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
    Vec::new()
}

/// Drops the pages of `segments` ([`code_segments`]) from this process's
/// resident set (`MADV_DONTNEED`; the mappings stay): the code only
/// start-up runs (policy parser, rule compiler, migrations) stays resident
/// otherwise. The file's pages stay in the page cache, shared with every
/// other wrap; what runs next maps its pages back (minor faults). Safe for
/// these segments only: nothing ever writes to them, so the file holds
/// exactly what was mapped.
pub fn release_code_pages(segments: &[Range<usize>]) {
    #[cfg(all(target_os = "linux", target_pointer_width = "64"))]
    for s in segments {
        #[allow(unsafe_code)]
        // SAFETY: `s` is a page-aligned part of a read-only, never written
        // file mapping of this executable; dropping its pages changes no
        // byte a thread can read.
        unsafe {
            libc::madvise(s.start as *mut libc::c_void, s.len(), libc::MADV_DONTNEED);
        }
    }
    #[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
    let _ = segments;
}

/// What an idle spell gives back, and when.
pub struct IdleTrim<F, C> {
    /// Free heap to the system ([`release_free_memory`]), after
    /// [`IDLE_TRIM_AFTER`]: 2–4 s after the last frame.
    pub free: F,
    /// The executable's pages ([`release_code_pages`]), after
    /// [`CODE_IDLE_AFTER`]: 30–32 s after it. Later than the heap: the call
    /// after it maps its code back (0.2–0.3 ms, BENCHMARKS.md), and an
    /// agent's calls a few seconds apart should not pay that each time.
    pub code: C,
}

/// How long wrap reads no frame before its code pages go.
pub const CODE_IDLE_AFTER: Duration = Duration::from_secs(30);

/// Gives memory back once per idle spell, in the two steps of [`IdleTrim`]:
/// an idle spell starts when `turns` (counted by the relay loop) stops
/// moving and ends at its next move. A busy relay is never trimmed: the
/// next call would fault the pages in again.
pub async fn trim_when_idle<F: FnMut(), C: FnMut()>(
    turns: Arc<AtomicU64>,
    mut trim: IdleTrim<F, C>,
) {
    let code_ticks = CODE_IDLE_AFTER.as_secs() / IDLE_TRIM_AFTER.as_secs();
    let mut seen = turns.load(Ordering::Relaxed);
    let mut idle_ticks: u64 = 0;
    loop {
        tokio::time::sleep(IDLE_TRIM_AFTER).await;
        let now = turns.load(Ordering::Relaxed);
        if now != seen {
            seen = now;
            idle_ticks = 0;
            continue;
        }
        idle_ticks = idle_ticks.saturating_add(1);
        if idle_ticks == 1 {
            (trim.free)();
        }
        if idle_ticks == code_ticks {
            (trim.code)();
        }
    }
}

/// A program header's fields that say whether its pages may be dropped.
#[derive(Clone, Copy, Debug)]
struct Segment {
    kind: u32,
    flags: u32,
    vaddr: u64,
    filesz: u64,
}

const PT_LOAD: u32 = 1;
const PF_W: u32 = 2;

/// The loaded, never-written segments of an object loaded at `bias`, each
/// shrunk to whole pages. Writable segments (data, and the relocated
/// read-only data, relro) hold private copies and are never included.
fn read_only_ranges(bias: usize, segments: &[Segment], page: usize) -> Vec<Range<usize>> {
    segments
        .iter()
        .filter(|s| s.kind == PT_LOAD && s.flags & PF_W == 0)
        .filter_map(|s| {
            let start = bias.checked_add(usize::try_from(s.vaddr).ok()?)?;
            let end = start.checked_add(usize::try_from(s.filesz).ok()?)?;
            let (start, end) = (start.div_ceil(page) * page, end / page * page);
            (start < end).then_some(start..end)
        })
        .collect()
}

/// This executable's program headers, read from the auxiliary vector.
#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
mod elf {
    use super::{read_only_ranges, Segment};
    use std::ops::Range;

    const PT_DYNAMIC: u32 = 2;
    const PT_PHDR: u32 = 6;
    const DT_NULL: i64 = 0;
    const DT_TEXTREL: i64 = 22;
    const DT_FLAGS: i64 = 30;
    const DF_TEXTREL: u64 = 4;

    pub fn own_segments() -> Vec<Range<usize>> {
        #[allow(unsafe_code)]
        // SAFETY: AT_PHDR and AT_PHNUM describe the program headers the
        // loader mapped for this executable; they live as long as the
        // process. PT_DYNAMIC points at its mapped dynamic section, an
        // array of (tag, value) pairs ended by DT_NULL.
        unsafe {
            let at = libc::getauxval(libc::AT_PHDR) as usize;
            let count = libc::getauxval(libc::AT_PHNUM) as usize;
            let page = libc::sysconf(libc::_SC_PAGESIZE);
            if at == 0 || count == 0 || page <= 0 {
                return Vec::new();
            }
            let headers = std::slice::from_raw_parts(at as *const libc::Elf64_Phdr, count);
            let Some(bias) = headers
                .iter()
                .find(|h| h.p_type == PT_PHDR)
                .map(|h| at.wrapping_sub(h.p_vaddr as usize))
            else {
                return Vec::new();
            };
            // Text relocations: the loader wrote into "read-only" code, so
            // the file no longer holds what runs. Rust never emits them;
            // refuse rather than trust that.
            for h in headers.iter().filter(|h| h.p_type == PT_DYNAMIC) {
                let mut entry = bias.wrapping_add(h.p_vaddr as usize) as *const [i64; 2];
                loop {
                    let [tag, value] = *entry;
                    if tag == DT_NULL {
                        break;
                    }
                    if tag == DT_TEXTREL || (tag == DT_FLAGS && value as u64 & DF_TEXTREL != 0) {
                        return Vec::new();
                    }
                    entry = entry.add(1);
                }
            }
            let segments: Vec<Segment> = headers
                .iter()
                .map(|h| Segment {
                    kind: h.p_type,
                    flags: h.p_flags,
                    vaddr: h.p_vaddr,
                    filesz: h.p_filesz,
                })
                .collect();
            read_only_ranges(bias, &segments, page as usize)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[tokio::test(start_paused = true)]
    async fn memory_is_trimmed_once_per_idle_spell_and_code_later() {
        let turns = Arc::new(AtomicU64::new(0));
        let freed = Arc::new(AtomicUsize::new(0));
        let dropped = Arc::new(AtomicUsize::new(0));
        let (f, d) = (Arc::clone(&freed), Arc::clone(&dropped));
        tokio::spawn(trim_when_idle(
            Arc::clone(&turns),
            IdleTrim {
                free: move || {
                    f.fetch_add(1, Ordering::Relaxed);
                },
                code: move || {
                    d.fetch_add(1, Ordering::Relaxed);
                },
            },
        ));
        let counts = || {
            (
                freed.load(Ordering::Relaxed),
                dropped.load(Ordering::Relaxed),
            )
        };
        let step = IDLE_TRIM_AFTER / 4;
        // Busy: a turn every quarter of the idle time.
        for _ in 0..20 {
            turns.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(step).await;
        }
        assert_eq!(counts(), (0, 0), "never while busy");
        tokio::time::sleep(IDLE_TRIM_AFTER * 2 + step).await;
        assert_eq!(counts(), (1, 0), "the heap once idle");
        tokio::time::sleep(CODE_IDLE_AFTER - IDLE_TRIM_AFTER * 3).await;
        assert_eq!(counts(), (1, 0), "the code not before its time");
        tokio::time::sleep(IDLE_TRIM_AFTER * 2).await;
        assert_eq!(counts(), (1, 1), "the code after it");
        tokio::time::sleep(CODE_IDLE_AFTER * 10).await;
        assert_eq!(counts(), (1, 1), "each once per idle spell");
        // Calls a few seconds apart: the heap after each, the code never.
        for _ in 0..10 {
            turns.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(IDLE_TRIM_AFTER * 3).await;
        }
        assert_eq!(counts(), (11, 1), "the heap in each pause only");
        tokio::time::sleep(CODE_IDLE_AFTER).await;
        assert_eq!(counts(), (11, 2), "and the code in a long one");
    }

    /// The program headers of a wrap build (`readelf -lW`, lld's layout):
    /// constants, code, relro + data, data.
    #[test]
    fn only_whole_pages_of_unwritten_segments_are_dropped() {
        let seg = |kind, flags, vaddr, filesz| Segment {
            kind,
            flags,
            vaddr,
            filesz,
        };
        let (r, rx, rw) = (4, 5, 6);
        let headers = [
            seg(6, r, 0x40, 0x2a0),
            seg(PT_LOAD, r, 0, 0x29cfd0),
            seg(PT_LOAD, rx, 0x29dfd0, 0xa8f150),
            seg(PT_LOAD, rw, 0xd2e120, 0x4b270),
            seg(PT_LOAD, rw, 0xd7a390, 0x50ec),
            seg(0x6474e552, r, 0xd2e120, 0x4b270), // GNU_RELRO
        ];
        let bias = 0x5555_0000_0000;
        assert_eq!(
            read_only_ranges(bias, &headers, 0x1000),
            vec![bias..bias + 0x29c000, bias + 0x29e000..bias + 0xd2d000,]
        );
        // A segment inside one page has no whole page to drop.
        assert!(read_only_ranges(0, &[seg(PT_LOAD, rx, 0x10, 0x100)], 0x1000).is_empty());
    }

    /// The test binary's own code pages leave its resident set, and the
    /// code still runs after.
    #[cfg(all(target_os = "linux", target_pointer_width = "64"))]
    #[test]
    fn dropped_code_pages_leave_the_resident_set_and_still_run() {
        let segments = code_segments();
        assert!(!segments.is_empty(), "this executable's segments are found");
        let resident = || -> u64 {
            let status = std::fs::read_to_string("/proc/self/status").unwrap();
            let line = status.lines().find(|l| l.starts_with("RssFile:")).unwrap();
            line.split_whitespace().nth(1).unwrap().parse().unwrap()
        };
        let before = resident();
        release_code_pages(&segments);
        let after = resident();
        assert!(after < before, "RssFile {before} kB → {after} kB");
        // Code that ran before runs again (mapped back from the file).
        only_whole_pages_of_unwritten_segments_are_dropped();
    }
}
